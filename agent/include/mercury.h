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
#ifndef MERCURY_H
#define MERCURY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MERCURY_OK		0
#define MERCURY_E_NOAGENT	(-1)	/* not connected now; kept and sent later */
#define MERCURY_E_INVAL		(-2)	/* bad argument */
#define MERCURY_E_NOMEM		(-3)
#define MERCURY_E_NOMODEL	(-4)	/* declare the model first */

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

/* This TCP socket carries @layer's tensor (the fd is passed, proving ownership). */
int mercury_register_socket(mercury_client *client, uint32_t layer, int fd);

/* An iteration begins (forward pass of @iteration). */
int mercury_begin_iteration(mercury_client *client, uint64_t iteration);

/* 1 if connected to the agent right now. */
int mercury_connected(const mercury_client *client);

const char *mercury_strerror(int error);

#ifdef __cplusplus
}
#endif

#endif /* MERCURY_H */
