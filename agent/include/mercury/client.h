/* SPDX-License-Identifier: GPL-2.0 */
/*
 * libmercury: how a trainer tells mercuryd about its model, its per-layer
 * compute timings and which TCP connection carries which layer's tensor.
 *
 * Every call is thread-safe and returns at once: if the agent is missing or
 * slow, the call returns MERCURY_E_NOAGENT, the library keeps what it was
 * told and sends it when it (re)connects in the background. Training must
 * never wait on Mercury.
 */
#ifndef MERCURY_CLIENT_H
#define MERCURY_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MERCURY_OK		0
#define MERCURY_E_NOAGENT	(-1)	/* not connected now; kept and sent later */
#define MERCURY_E_INVAL		(-2)	/* bad argument */
#define MERCURY_E_NOMEM		(-3)
#define MERCURY_E_NOMODEL	(-4)	/* declare the model first */
#define MERCURY_E_CC		(-5)	/* congestion control not set (errno says why) */

typedef struct mercury_client mercury_client;

/* socket_path NULL: $MERCURY_SOCKET, else /run/mercury/mercuryd.sock. */
mercury_client *mercury_open(const char *socket_path, const char *job,
			     uint32_t worker_rank);
void mercury_close(mercury_client *client);

/* Layers in forward order; names may be NULL. */
int mercury_declare_model(mercury_client *client, uint32_t n_layers,
			  const char *const *names, const uint64_t *param_bytes);

/* One iteration's measured compute per layer, microseconds. */
int mercury_report_timings(mercury_client *client, uint64_t iteration,
			   uint32_t n_layers, const uint32_t *forward_us,
			   const uint32_t *backward_us);

/*
 * This TCP socket carries @layer's tensor. The fd is passed, proving
 * ownership; the library keeps its number and cookie (not a duplicate: no
 * descriptor more) to pass it again to a restarted agent. Call
 * mercury_release_socket() before closing a socket you registered; one
 * closed without it is forgotten when its cookie no longer matches.
 */
int mercury_register_socket(mercury_client *client, uint32_t layer, int fd);

/* Forgets a registered socket (layer or lane): it is not passed again. */
int mercury_release_socket(mercury_client *client, int fd);

/*
 * Priority lanes. A framework that sends every layer over the same
 * connections opens @lanes sets of them instead (1..8) and sends each layer
 * on the lane of its rank: lane = rank * lanes / 8. This socket carries lane
 * @lane; the agent gives it that lane's rank, ceil(lane * 8 / lanes). The
 * fd is passed (proving ownership), and the library keeps its number and
 * cookie to pass it again to a restarted agent until
 * mercury_release_lanes() or mercury_close(): release before closing the
 * lanes' sockets.
 */
int mercury_register_lane(mercury_client *client, uint32_t lane, uint32_t lanes, int fd);

/* Forgets every lane socket; the agent withdraws their entries. */
int mercury_release_lanes(mercury_client *client);

/* Ask the agent for the layers' ranks, now and whenever they change. */
int mercury_subscribe_ranks(mercury_client *client);

/*
 * The latest ranks the agent sent, one per layer (0 most urgent, 7 least):
 * returns how many (0: none received yet) or MERCURY_E_INVAL if @n_layers
 * is too small. @generation changes whenever a rank does; @datapath is 1
 * when a Mercury datapath enforces them. Either may be NULL.
 */
int mercury_layer_ranks(mercury_client *client, uint8_t *ranks, uint32_t n_layers,
			uint32_t *generation, int *datapath);

/* The errno the agent gave when it last refused us (0: none), with its reason. */
int mercury_last_error(mercury_client *client, char *message, size_t size);

/* An iteration begins (forward pass of @iteration). */
int mercury_begin_iteration(mercury_client *client, uint64_t iteration);

/* 1 if connected to the agent right now. */
int mercury_connected(const mercury_client *client);

/*
 * Sets congestion control @cc on TCP socket @fd and reads it back: 0 if the
 * socket runs @cc now; MERCURY_E_CC if the kernel refused it (errno: ENOENT
 * not available, EPERM not in net.ipv4.tcp_allowed_congestion_control for
 * this process) or the socket reads back another (errno EPROTO);
 * MERCURY_E_INVAL for a bad argument. Needs no agent: every data socket a
 * trainer, server or plugin opens selects Mercury this way.
 */
int mercury_set_congestion_control(int fd, const char *cc);

/* The congestion control @fd runs, NUL-terminated in @name (@size >= 16):
 * 0, MERCURY_E_INVAL or MERCURY_E_CC (errno). */
int mercury_congestion_control(int fd, char *name, size_t size);

const char *mercury_strerror(int error);

#ifdef __cplusplus
}
#endif

#endif /* MERCURY_CLIENT_H */
