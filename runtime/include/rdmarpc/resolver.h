// rdmarpc/resolver.h: how a Channel finds its servers' addresses, and how
// users add their own ways (a file, Consul, ...).
//
// A target that starts with a registered scheme and a colon ("dns:",
// "myscheme:") is handed to that scheme's ResolverFactory; any other target is
// a static address list (rdmarpc/channel.h). Built in: "dns"
// (`dns:[//AUTHORITY/]NAME:PORT`, as gRPC's doc/naming.md) and "etcd"
// (`etcd://HOST:PORT[,HOST:PORT...]/PREFIX`: the servers registered under
// PREFIX, ServerOptions::register_target). The names follow
// gRPC's resolver API: a Resolver reports the current list of addresses to
// the channel's ResolverListener whenever it changes; the channel asks it to
// resolve again (RequestReresolution) when a connection to one of them
// fails.
//
//   class FileResolverFactory : public rdmarpc::ResolverFactory {
//     std::string scheme() const override { return "file"; }
//     absl::StatusOr<std::unique_ptr<rdmarpc::Resolver>> Create(
//         const rdmarpc::ResolverArgs& args) override;
//   };
//   rdmarpc::RegisterResolverFactory(std::make_unique<FileResolverFactory>());
//   auto channel = rdmarpc::CreateChannel("file:/etc/myservice.servers");
#ifndef RDMARPC_RESOLVER_H_
#define RDMARPC_RESOLVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdmarpc/export.h"

namespace rdmarpc {

// Where a resolver reports. Owned by the channel; valid until the resolver's
// destructor returns. Any thread, but not from inside the resolver's
// destructor; calls need not be serialised (the channel takes its own lock).
class RDMARPC_EXPORT ResolverListener {
 public:
  virtual ~ResolverListener() = default;
  // The complete current list, each "IP:PORT" or "[IPV6]:PORT" (numeric, as
  // rdmarpc/channel.h's static targets; duplicates count once). Replaces the
  // previous list: new addresses are connected to in the background,
  // addresses left out get no new calls and their connections close once
  // their calls ended. An entry that does not parse is skipped and logged.
  // An empty list is an error (see OnError) of code UNAVAILABLE.
  virtual void OnAddresses(std::vector<std::string> addresses) = 0;
  // Resolution failed (a resolver should pass UNAVAILABLE, with the name and
  // why). The channel keeps the last list it had; with none, calls waiting
  // for one and new calls fail UNAVAILABLE with this message until a list
  // arrives.
  virtual void OnError(absl::Status status) = 0;
};

// One channel's resolver. Created by its factory when the channel is, and
// destroyed with the channel.
class RDMARPC_EXPORT Resolver {
 public:
  // After it returns the resolver calls its listener no more (it joins any
  // thread of its own).
  virtual ~Resolver() = default;
  // A connection to an address it reported failed: resolve again soon (a
  // resolver may wait, e.g. to rate-limit). Called from the channel's
  // engine threads, with the channel's lock held: must not block, must not
  // call the listener from inside this call, and must not take a lock the
  // resolver holds while it calls the listener.
  virtual void RequestReresolution() {}
};

struct RDMARPC_EXPORT ResolverArgs {
  // The whole target, scheme included ("dns://10.0.0.2/svc.example:7000").
  std::string target;
  // ChannelOptions::resolver_refresh_interval: how often a resolver that
  // polls (DNS) asks again when nothing else makes it.
  absl::Duration refresh_interval = absl::Seconds(30);
  // The listener to report to; not owned.
  ResolverListener* listener = nullptr;
};

class RDMARPC_EXPORT ResolverFactory {
 public:
  virtual ~ResolverFactory() = default;
  // The scheme this factory serves, without the colon ("dns"): letters,
  // digits, '+', '-', '.', starting with a letter (RFC 3986).
  virtual std::string scheme() const = 0;
  // Called by CreateChannel, on its caller's thread (so possibly by several
  // threads at once). Creates a resolver for `args.target`, which starts resolving at once
  // and reports its first result (or error) from its own thread; it may
  // report from inside Create too. INVALID_ARGUMENT for a malformed target,
  // naming the bad part; CreateChannel returns that status.
  virtual absl::StatusOr<std::unique_ptr<Resolver>> Create(const ResolverArgs& args) = 0;
};

// Adds `factory` for its scheme, replacing an earlier one of that scheme
// (the built-in "dns" included). Any thread; channels created afterwards use
// it. INVALID_ARGUMENT for a malformed scheme, or "ipv4" / "ipv6" (static
// list schemes, not resolvers).
RDMARPC_EXPORT absl::Status RegisterResolverFactory(std::unique_ptr<ResolverFactory> factory);

}  // namespace rdmarpc

#endif  // RDMARPC_RESOLVER_H_
