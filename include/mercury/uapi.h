/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * Mercury: the contract between tcp_mercury.ko and user space (mercuryd,
 * mercuryctl, tests). One definition, included by both sides.
 *
 * Generic netlink family MERCURY_GENL_NAME, version MERCURY_GENL_VERSION
 * (2 added jobs: MERCURY_ATTR_JOB; a request without it means job 0, so
 * version 1 clients work unchanged, and a version 1 module refuses JOB as
 * an unknown attribute).
 * Every netns has its own table of entries and its own parameters; requests
 * act on the caller's netns. Mutating commands need CAP_NET_ADMIN in the
 * user namespace owning that netns (-EPERM otherwise). Malformed requests
 * (unknown or reply-only attributes, wrong lengths, missing attributes) fail
 * with -EINVAL; values outside the ranges below fail with -ERANGE, the
 * netlink core's code, with the bounds in the extended ack. Either way
 * nothing changes.
 *
 * An entry maps a *tag* (a socket's SO_PRIORITY) or a *flow* (socket cookie,
 * or local/remote address and port) to a rank and a weight:
 *   rank   0 .. MERCURY_NUM_RANKS - 1; lower is more urgent. While a flow of
 *          rank r has data in flight on a host, flows of rank > r on that
 *          host hold their cwnd at the floor.
 *   weight MERCURY_WEIGHT_MIN .. MERCURY_WEIGHT_MAX; share within a rank,
 *          MERCURY_WEIGHT_UNIT being one standard Reno flow's worth.
 *   job    0 .. MERCURY_NUM_JOBS - 1 (optional; 0 = no job). Precedence
 *          and holds apply only among flows of the same job: flows of
 *          different jobs share the link by weight (mercuryd scales a job's
 *          entry weights by the job's weight). A flow of a job (not 0) does
 *          not yield to queueing delay while another job has data out on
 *          its host, and yields for at most max_hold_ms at a stretch, then
 *          not for max_hold_ms / 8, as holds are lifted: another job's
 *          traffic cannot keep it yielding forever. Job 0 behaves as
 *          version 1 did.
 * A flow entry beats a tag entry. A flow matching neither is *unranked* and
 * behaves as a plain fair loss-based flow. Entries expire TTL_MS after they
 * were last set unless set again.
 *
 * Who may claim a rank: any process may set SO_PRIORITY 0..6 on its own
 * sockets; larger values need CAP_NET_ADMIN over the socket's netns. Tags
 * start at MERCURY_TAG_MIN (smaller ones get -ERANGE, and the datapaths never
 * look them up), so a tag names only sockets a privileged process marked.
 * An unprivileged trainer gets a rank through mercuryd, which requires the
 * socket's fd as proof that the socket is its own.
 */
#ifndef _UAPI_MERCURY_H
#define _UAPI_MERCURY_H

#define MERCURY_GENL_NAME	"mercury"
#define MERCURY_GENL_VERSION	2
#define MERCURY_CA_NAME		"mercury"

#define MERCURY_NUM_RANKS	8
#define MERCURY_RANK_NONE	0xff	/* reported for unranked flows */
#define MERCURY_NUM_JOBS	16	/* job ids 0 .. 15; 0 = no job */
#define MERCURY_JOB_NONE	0
#define MERCURY_TAG_MIN		7	/* SO_PRIORITY above TC_PRIO_INTERACTIVE */
#define MERCURY_WEIGHT_UNIT	16
#define MERCURY_WEIGHT_MIN	1
#define MERCURY_WEIGHT_MAX	1024
#define MERCURY_TTL_MS_MIN	100
#define MERCURY_TTL_MS_MAX	3600000

enum mercury_cmd {
	MERCURY_CMD_UNSPEC,
	MERCURY_CMD_TAG_SET,	/* TAG, RANK, [WEIGHT], [TTL_MS], [JOB] */
	MERCURY_CMD_TAG_DEL,	/* TAG; -ENOENT if absent */
	MERCURY_CMD_TAG_GET,	/* dump: TAG, RANK, WEIGHT, EXPIRES_MS, JOB */
	MERCURY_CMD_FLOW_SET,	/* FLOW, RANK, [WEIGHT], [TTL_MS], [JOB] */
	MERCURY_CMD_FLOW_DEL,	/* FLOW; -ENOENT if absent */
	MERCURY_CMD_FLOW_GET,	/* dump: FLOW, RANK, WEIGHT, EXPIRES_MS, JOB */
	MERCURY_CMD_FLUSH,	/* drop every entry of this netns */
	MERCURY_CMD_PARAMS_GET,	/* reply: PARAMS */
	MERCURY_CMD_PARAMS_SET,	/* PARAMS (any subset; all or nothing) */
	MERCURY_CMD_STATS_GET,	/* reply: STATS */

	__MERCURY_CMD_MAX,
	MERCURY_CMD_MAX = __MERCURY_CMD_MAX - 1
};

enum mercury_attr {
	MERCURY_ATTR_UNSPEC,
	MERCURY_ATTR_PAD,
	MERCURY_ATTR_TAG,		/* u32: SO_PRIORITY value */
	MERCURY_ATTR_RANK,		/* u8 */
	MERCURY_ATTR_WEIGHT,		/* u16 */
	MERCURY_ATTR_TTL_MS,		/* u32 */
	MERCURY_ATTR_EXPIRES_MS,	/* u32, replies only: time left */
	MERCURY_ATTR_FLOW,		/* nest: enum mercury_flow_attr */
	MERCURY_ATTR_PARAMS,		/* nest: enum mercury_param */
	MERCURY_ATTR_STATS,		/* nest, replies only: enum mercury_stat */
	MERCURY_ATTR_JOB,		/* u8, version 2: 0 .. MERCURY_NUM_JOBS - 1 */

	__MERCURY_ATTR_MAX,
	MERCURY_ATTR_MAX = __MERCURY_ATTR_MAX - 1
};

/*
 * A flow is named either by COOKIE alone (getsockopt(SO_COOKIE) of the local
 * socket) or by all of FAMILY, SADDR, DADDR, SPORT, DPORT as the local socket
 * sees them (SADDR/SPORT local). IPv4 addresses are 4 bytes, IPv6 16.
 */
enum mercury_flow_attr {
	MERCURY_FLOW_ATTR_UNSPEC,
	MERCURY_FLOW_ATTR_PAD,
	MERCURY_FLOW_ATTR_COOKIE,	/* u64 */
	MERCURY_FLOW_ATTR_FAMILY,	/* u8: AF_INET or AF_INET6 */
	MERCURY_FLOW_ATTR_SADDR,	/* binary, 4 or 16 bytes */
	MERCURY_FLOW_ATTR_DADDR,	/* binary, 4 or 16 bytes */
	MERCURY_FLOW_ATTR_SPORT,	/* u16, host order */
	MERCURY_FLOW_ATTR_DPORT,	/* u16, host order */

	__MERCURY_FLOW_ATTR_MAX,
	MERCURY_FLOW_ATTR_MAX = __MERCURY_FLOW_ATTR_MAX - 1
};

/* Per-netns parameters; new namespaces start from the module parameters. */
enum mercury_param {
	MERCURY_PARAM_UNSPEC,
	MERCURY_PARAM_CWND_FLOOR,	/* u32, packets a held flow keeps */
	MERCURY_PARAM_DELAY_THRESH_US,	/* u32, 0 = no delay-based yielding */
	MERCURY_PARAM_ENTRY_TTL_MS,	/* u32, default entry lifetime */
	MERCURY_PARAM_MAX_ENTRIES,	/* u32, table size limit */
	MERCURY_PARAM_MAX_HOLD_MS,	/* u32, longest continuous hold */
	MERCURY_PARAM_DEBUG,		/* u8, 0 or 1 */

	__MERCURY_PARAM_MAX,
	MERCURY_PARAM_MAX = __MERCURY_PARAM_MAX - 1
};

#define MERCURY_CWND_FLOOR_MIN		1
#define MERCURY_CWND_FLOOR_MAX		64
#define MERCURY_DELAY_THRESH_US_MAX	1000000
#define MERCURY_MAX_ENTRIES_MIN		1
#define MERCURY_MAX_ENTRIES_MAX		65536
#define MERCURY_MAX_HOLD_MS_MIN		10
#define MERCURY_MAX_HOLD_MS_MAX		60000

/* Defaults: the module's parameters, and the BPF datapath's per-netns
 * values until a netns sets its own. */
#define MERCURY_DEFAULT_CWND_FLOOR	2
#define MERCURY_DEFAULT_DELAY_THRESH_US	1000
#define MERCURY_DEFAULT_ENTRY_TTL_MS	10000
#define MERCURY_DEFAULT_MAX_ENTRIES	16384
#define MERCURY_DEFAULT_MAX_HOLD_MS	1000

/*
 * The events both datapaths count per netns, once: X(NAME, name). Expanded
 * into tcp_mercury.ko's counters and their MERCURY_STAT_<NAME> attributes
 * below, the BPF datapath's counter slots (include/mercury/bpf_maps.h: the
 * order is their layout, which pinned maps keep across restarts, so append
 * only) and the agent's names for them (mercuryctl stats, metrics).
 */
#define MERCURY_EVENTS(X)					\
	X(FLOWS_INIT, flows_init)				\
	X(FLOWS_RELEASED, flows_released)			\
	X(HOLDS, holds)						\
	X(RELEASES, releases)					\
	X(STARVE_GRANTS, starve_grants)				\
	X(DELAY_BACKOFFS, delay_backoffs)			\
	X(LOSS_EVENTS, loss_events)				\
	X(CWND_FIXUPS, cwnd_fixups)				\
	X(RECOVERIES, recoveries)				\
	X(RECOVERIES_FROM_CWR, recoveries_from_cwr)		\
	X(HELD_IN_RECOVERY, held_in_recovery)			\
	X(HOLD_LEAKS, hold_leaks)				\
	X(YIELD_GRANTS, yield_grants)				\
	X(JOB_CUTS, job_cuts)					\
	X(PACING_CLEARED, pacing_cleared)			\
	X(ZERO_WINDOWS, zero_windows)

/* Counters of this netns (u64) unless marked global. The numbers are ABI:
 * a new attribute goes last. */
enum mercury_stat {
	MERCURY_STAT_UNSPEC,
	MERCURY_STAT_PAD,
	MERCURY_STAT_FLOWS_INIT,	/* flows that started using mercury */
	MERCURY_STAT_FLOWS_RELEASED,	/* flows that stopped using it */
	MERCURY_STAT_HOLDS,		/* transitions into held */
	MERCURY_STAT_RELEASES,		/* transitions out of held */
	MERCURY_STAT_STARVE_GRANTS,	/* holds lifted by the starvation guard */
	MERCURY_STAT_DELAY_BACKOFFS,	/* delay-based yields */
	MERCURY_STAT_LOSS_EVENTS,	/* ssthresh() calls: recovery, loss, CWR */
	MERCURY_STAT_CWND_FIXUPS,	/* implausible cwnd/ssthresh repaired */
	MERCURY_STAT_TAG_ENTRIES,	/* tag entries now in the table */
	MERCURY_STAT_FLOW_ENTRIES,	/* flow entries now in the table */
	MERCURY_STAT_EXPIRED,		/* entries removed by expiry */
	MERCURY_STAT_TABLE_GEN,		/* bumped by every table change */
	MERCURY_STAT_GLOBAL_ENTRIES,	/* global: entries in all netns */
	MERCURY_STAT_RECOVERIES,	/* entries into fast recovery */
	MERCURY_STAT_RECOVERIES_FROM_CWR, /* of those, from CWR: no ssthresh() call */
	MERCURY_STAT_HELD_IN_RECOVERY,	/* ACKs a held flow took in CWR/Recovery */
	MERCURY_STAT_HOLD_LEAKS,	/* held flows found above the floor outside
					 * a reduction: a burst the hold missed */
	MERCURY_STAT_YIELD_GRANTS,	/* delay yields skipped: a job's flow had
					 * yielded for max_hold_ms (version 2) */
	MERCURY_STAT_JOB_CUTS,		/* back-offs with another flow of the
					 * job that lost a packet (version 2) */
	MERCURY_STAT_PACING_CLEARED,	/* flows whose previous CC's request
					 * for internal pacing was dropped */
	MERCURY_STAT_ZERO_WINDOWS,	/* a hook found cwnd or ssthresh at 0
					 * or past 2^31 - 1: a window the
					 * kernel WARNs about (or makes one
					 * of); repaired, never expected */

	__MERCURY_STAT_MAX,
	MERCURY_STAT_MAX = __MERCURY_STAT_MAX - 1
};

/*
 * get_info (ss -ti, TCP_CC_INFO) reuses the DCTCP layout, struct
 * tcp_dctcp_info, so existing tools print it; ss shows it as
 * "dctcp:(ce_state:S,alpha:W,ab_ecn:T,ab_tot:H)" with:
 *   dctcp_enabled  always 1
 *   dctcp_ce_state rank (MERCURY_RANK_NONE if unranked) | MERCURY_INFO_HELD
 *                  | job << MERCURY_INFO_JOB_SHIFT
 *   dctcp_alpha    weight
 *   dctcp_ab_ecn   tag (the socket's SO_PRIORITY)
 *   dctcp_ab_tot   number of times the flow was held
 */
#define MERCURY_INFO_RANK	0xff
#define MERCURY_INFO_HELD	0x100
#define MERCURY_INFO_JOB_SHIFT	9
#define MERCURY_INFO_JOB	(0xf << MERCURY_INFO_JOB_SHIFT)

#endif /* _UAPI_MERCURY_H */
