// rdmarpc/rdmarpc.h: the whole public API in one include.
//
// Generated files (NAME.rdmarpc.pb.h) include this; user code usually needs
// nothing else.
#ifndef RDMARPC_RDMARPC_H_
#define RDMARPC_RDMARPC_H_

#include "rdmarpc/access_log.h"
#include "rdmarpc/admin.h"
#include "rdmarpc/buffer.h"
#include "rdmarpc/channel.h"
#include "rdmarpc/client_callback.h"
#include "rdmarpc/client_context.h"
#include "rdmarpc/generic_stub.h"
#include "rdmarpc/impl/method_handler.h"
#include "rdmarpc/impl/unary_call.h"
#include "rdmarpc/interceptor.h"
#include "rdmarpc/metrics.h"
#include "rdmarpc/server.h"
#include "rdmarpc/server_callback.h"
#include "rdmarpc/server_context.h"
#include "rdmarpc/service.h"
#include "rdmarpc/sync_stream.h"

#endif  // RDMARPC_RDMARPC_H_
