// SPDX-License-Identifier: GPL-2.0
#include "ps/metrics.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <sstream>
#include <stdexcept>

namespace mercury::ps {

namespace {

prometheus::Counter& counter(prometheus::Registry& r, const std::string& name, const std::string& help,
                             const prometheus::Labels& labels = {})
{
    return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Gauge& gauge(prometheus::Registry& r, const std::string& name, const std::string& help)
{
    return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

Metrics::Metrics(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& at)
    : registry_(std::make_shared<prometheus::Registry>()),
      accepted_(counter(*registry_, "mercury_ps_connections_total", "worker connections by outcome",
                        {{"result", "accepted"}})),
      refused_(counter(*registry_, "mercury_ps_connections_total", "worker connections by outcome",
                       {{"result", "refused"}})),
      finished_(counter(*registry_, "mercury_ps_jobs_total", "jobs by how they ended", {{"end", "finished"}})),
      failed_(counter(*registry_, "mercury_ps_jobs_total", "jobs by how they ended", {{"end", "failed"}})),
      members_(gauge(*registry_, "mercury_ps_members", "connections in the running job")),
      job_bytes_(gauge(*registry_, "mercury_ps_job_bytes", "gradient bytes the running job declared")),
      pushed_(counter(*registry_, "mercury_ps_pushed_bytes_total", "gradient bytes workers pushed")),
      answered_(counter(*registry_, "mercury_ps_answered_bytes_total", "summed bytes sent back to workers")),
      acceptor_(io)
{
    boost::system::error_code ec;
    acceptor_.open(at.protocol(), ec);
    if (!ec)
        acceptor_.set_option(boost::asio::ip::tcp::acceptor::reuse_address(true), ec);
    if (!ec)
        acceptor_.bind(at, ec);
    if (!ec)
        acceptor_.listen(boost::asio::socket_base::max_listen_connections, ec);
    if (ec)
        throw std::runtime_error("cannot serve metrics on " + at.address().to_string() + ":" +
                                 std::to_string(at.port()) + ": " + ec.message());
    accept();
}

Metrics::~Metrics() = default;

int Metrics::port() const
{
    return acceptor_.local_endpoint().port();
}

std::string Metrics::page() const
{
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry_->Collect());
    return out.str();
}

// One request per connection, within two seconds: a connection that sends
// nothing, or reads nothing, is closed then.
struct Metrics::Scrape {
    explicit Scrape(boost::asio::ip::tcp::socket s) : stream(std::move(s)) {}
    boost::beast::tcp_stream stream;
    boost::beast::flat_buffer buffer;
    boost::beast::http::request<boost::beast::http::empty_body> request;
    boost::beast::http::response<boost::beast::http::string_body> response;
};

void Metrics::accept()
{
    namespace beast = boost::beast;
    namespace http = beast::http;
    acceptor_.async_accept([this](const boost::system::error_code& ec, boost::asio::ip::tcp::socket socket) {
        if (ec == boost::asio::error::operation_aborted)
            return;
        if (!ec) {
            // At the limit, the connection open longest goes: it has had
            // its chance, and the new one may be the scrape.
            scrapes_.remove_if([](const std::weak_ptr<Scrape>& w) { return w.expired(); });
            if (scrapes_.size() >= kMaxScrapers) {
                if (const auto oldest = scrapes_.front().lock())
                    oldest->stream.close();
                scrapes_.pop_front();
            }
            auto scrape = std::make_shared<Scrape>(std::move(socket));
            scrapes_.push_back(scrape);
            scrape->stream.expires_after(std::chrono::seconds(2));
            http::async_read(scrape->stream, scrape->buffer, scrape->request,
                             [this, scrape](const beast::error_code& rec, size_t) {
                                 if (rec)
                                     return;
                                 const bool found = scrape->request.method() == http::verb::get &&
                                                    scrape->request.target() == "/metrics";
                                 auto& r = scrape->response;
                                 r.version(scrape->request.version());
                                 r.keep_alive(false);
                                 r.result(found ? http::status::ok : http::status::not_found);
                                 r.set(http::field::content_type, "text/plain; version=0.0.4");
                                 r.body() = found ? page() : "mercury-ps serves /metrics\n";
                                 r.prepare_payload();
                                 http::async_write(scrape->stream, r, [scrape](const beast::error_code&, size_t) {
                                     beast::error_code ignored;
                                     scrape->stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send,
                                                                      ignored);
                                 });
                             });
        }
        accept();
    });
}

void Metrics::connection(bool accepted)
{
    (accepted ? accepted_ : refused_).Increment();
}

void Metrics::job_started(uint64_t bytes)
{
    job_bytes_.Set(static_cast<double>(bytes));
}

void Metrics::job_ended(bool failed)
{
    (failed ? failed_ : finished_).Increment();
    job_bytes_.Set(0);
}

void Metrics::members(size_t n)
{
    members_.Set(static_cast<double>(n));
}

void Metrics::pushed(uint64_t bytes)
{
    pushed_.Increment(static_cast<double>(bytes));
}

void Metrics::answered(uint64_t bytes)
{
    answered_.Increment(static_cast<double>(bytes));
}

}  // namespace mercury::ps
