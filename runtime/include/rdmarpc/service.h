// rdmarpc/service.h: the base class of every generated `S::Service`.
//
// Users do not derive from this directly; they derive from the class that
// protoc-gen-rdmarpc generates for their service and override its methods:
//
//   class EchoImpl final : public demo::EchoService::Service {
//     absl::Status Echo(rdmarpc::ServerContext*, const demo::EchoRequest& req,
//                       demo::EchoResponse* resp) override { ... }
//   };
//
// The generated constructor registers one MethodHandler per RPC; methods the
// user does not override return UNIMPLEMENTED.
#ifndef RDMARPC_SERVICE_H_
#define RDMARPC_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "rdmarpc/export.h"
#include "rdmarpc/impl/method_handler.h"

namespace rdmarpc {

class RDMARPC_EXPORT Service {
 public:
  virtual ~Service() = default;
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Full protobuf name, "package.Service".
  const std::string& full_name() const { return full_name_; }
  // One handler per RPC, in .proto order. Read by Server::AddService.
  const std::vector<std::unique_ptr<internal::MethodHandler>>& methods() const {
    return methods_;
  }

 protected:
  explicit Service(std::string full_name) : full_name_(std::move(full_name)) {}
  void AddMethod(std::unique_ptr<internal::MethodHandler> handler) {
    methods_.push_back(std::move(handler));
  }

 private:
  std::string full_name_;
  std::vector<std::unique_ptr<internal::MethodHandler>> methods_;
};

}  // namespace rdmarpc

#endif  // RDMARPC_SERVICE_H_
