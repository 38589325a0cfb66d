// The server side of generated code (golden/*.proto): S::Service registers
// one handler per method under its full name, in .proto order, running
// inline exactly where the run_inline options say so; methods not overridden
// return UNIMPLEMENTED; overrides -- under mangled names too -- are reached
// through MethodHandler::Invoke as the runtime calls them.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "golden/golden_test.rdmarpc.pb.h"
#include "golden/no_package.rdmarpc.pb.h"
#include "golden/service_names.rdmarpc.pb.h"
#include "gtest/gtest.h"

namespace {

using ::golden::v1::Admin;
using ::golden::v1::Store;

std::vector<std::string> MethodNames(const rdmarpc::Service& service) {
  std::vector<std::string> names;
  for (const auto& handler : service.methods()) names.push_back(handler->full_name());
  return names;
}

// Calls handler `index` of `service` the way the runtime does: fresh
// messages from the handler, the request parsed from `request`.
absl::Status InvokeMethod(const rdmarpc::Service& service, size_t index,
                          const google::protobuf::MessageLite& request,
                          std::unique_ptr<google::protobuf::MessageLite>* response) {
  const rdmarpc::internal::MethodHandler& handler = *service.methods().at(index);
  std::unique_ptr<google::protobuf::MessageLite> parsed = handler.NewRequest();
  EXPECT_TRUE(parsed->ParseFromString(request.SerializeAsString()));
  *response = handler.NewResponse();
  rdmarpc::ServerContext context;
  return handler.Invoke(&context, *parsed, response->get());
}

TEST(GeneratedService, FullNamesOfServiceAndMethodsInProtoOrder) {
  Store::Service store;
  EXPECT_EQ(store.full_name(), "golden.v1.Store");
  EXPECT_EQ(std::string(Store::service_full_name), "golden.v1.Store");
  EXPECT_EQ(MethodNames(store),
            (std::vector<std::string>{
                "/golden.v1.Store/Get", "/golden.v1.Store/delete", "/golden.v1.Store/delete_",
                "/golden.v1.Store/Stub", "/golden.v1.Store/Service", "/golden.v1.Store/NewStub",
                "/golden.v1.Store/async", "/golden.v1.Store/Store", "/golden.v1.Store/Peek"}));

  Admin::Service admin;
  EXPECT_EQ(admin.full_name(), "golden.v1.Admin");
  EXPECT_EQ(MethodNames(admin),
            (std::vector<std::string>{"/golden.v1.Admin/class", "/golden.v1.Admin/new",
                                      "/golden.v1.Admin/Ping"}));
}

std::vector<bool> RunInline(const rdmarpc::Service& service) {
  std::vector<bool> run_inline;
  for (const auto& handler : service.methods()) run_inline.push_back(handler->run_inline());
  return run_inline;
}

TEST(GeneratedService, HandlersRunInlineExactlyWhereTheOptionsSay) {
  // Store: only Peek sets (rdmarpc.method).run_inline = true.
  Store::Service store;
  EXPECT_EQ(RunInline(store),
            (std::vector<bool>{false, false, false, false, false, false, false, false, true}));
  // Admin: (rdmarpc.service).run_inline = true; new sets
  // (rdmarpc.method).run_inline = false.
  Admin::Service admin;
  EXPECT_EQ(RunInline(admin), (std::vector<bool>{true, false, true}));
  // No options at all.
  ::Notes::Service notes;
  EXPECT_EQ(RunInline(notes), (std::vector<bool>{false}));
}

TEST(GeneratedService, DefaultMethodsReturnUnimplementedNamingTheMethod) {
  Store::Service store;
  for (size_t i = 0; i < store.methods().size(); ++i) {
    const rdmarpc::internal::MethodHandler& handler = *store.methods()[i];
    std::unique_ptr<google::protobuf::MessageLite> request = handler.NewRequest();
    std::unique_ptr<google::protobuf::MessageLite> response;
    absl::Status status = InvokeMethod(store, i, *request, &response);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << handler.full_name();
    EXPECT_EQ(status.message(),
              "method " + handler.full_name() + " is not implemented by this server");
  }
}

TEST(GeneratedService, HandlersMakeMessagesOfTheMethodsTypes) {
  Store::Service store;
  EXPECT_EQ(store.methods()[0]->NewRequest()->GetTypeName(), "golden.v1.Request");
  EXPECT_EQ(store.methods()[0]->NewResponse()->GetTypeName(), "golden.v1.Response");
  EXPECT_EQ(store.methods()[1]->NewResponse()->GetTypeName(), "golden.v1.Status");
  EXPECT_EQ(store.methods()[3]->NewRequest()->GetTypeName(), "golden.common.Ping");
  EXPECT_EQ(store.methods()[3]->NewResponse()->GetTypeName(), "golden.common.Empty");
  EXPECT_EQ(store.methods()[4]->NewRequest()->GetTypeName(), "golden.v1.Outer.Inner");
  EXPECT_EQ(store.methods()[4]->NewResponse()->GetTypeName(), "golden.v1.Channel");
}

class StoreImpl final : public Store::Service {
 public:
  absl::Status Get(rdmarpc::ServerContext* context, const golden::v1::Request& request,
                   golden::v1::Response* response) override {
    seen_method_ = context->method();
    response->set_key(request.key() + "!");
    response->set_value(request.value() * 2);
    return absl::OkStatus();
  }
  absl::Status delete__(rdmarpc::ServerContext*, const golden::v1::Request& request,
                        golden::v1::Status* response) override {
    response->set_code(7);
    response->set_text("deleted " + request.key());
    return absl::OkStatus();
  }
  absl::Status delete_(rdmarpc::ServerContext*, const golden::v1::Request&,
                       golden::v1::Response*) override {
    return absl::NotFoundError("delete_ called");
  }
  absl::Status Stub_(rdmarpc::ServerContext*, const golden::common::Ping&,
                     golden::common::Empty*) override {
    return absl::AbortedError("Stub_ called");
  }
  absl::Status Service_(rdmarpc::ServerContext*, const golden::v1::Outer::Inner& request,
                        golden::v1::Channel*) override {
    return absl::InvalidArgumentError("Service_ called with " + request.text());
  }
  absl::Status NewStub_(rdmarpc::ServerContext*, const golden::v1::Request&,
                        golden::v1::Response*) override {
    return absl::OutOfRangeError("NewStub_ called");
  }
  absl::Status async_(rdmarpc::ServerContext*, const golden::v1::Request&,
                      golden::v1::Response*) override {
    return absl::DataLossError("async_ called");
  }
  absl::Status Store_(rdmarpc::ServerContext*, const golden::v1::Request&,
                      golden::v1::Response*) override {
    return absl::PermissionDeniedError("Store_ called");
  }

  std::string seen_method_;
};

TEST(GeneratedService, OverrideIsCalledThroughInvokeWithTheRequest) {
  StoreImpl store;
  golden::v1::Request request;
  request.set_key("k");
  request.set_value(21);
  std::unique_ptr<google::protobuf::MessageLite> response;
  ASSERT_TRUE(InvokeMethod(store, 0, request, &response).ok());
  const auto& typed = static_cast<const golden::v1::Response&>(*response);
  EXPECT_EQ(typed.key(), "k!");
  EXPECT_EQ(typed.value(), 42);
  // A ServerContext made for a unit test names no method (the runtime's do).
  EXPECT_EQ(store.seen_method_, "");
}

TEST(GeneratedService, MangledOverridesAreCalledForTheirWireNames) {
  StoreImpl store;
  golden::v1::Request request;
  request.set_key("x");
  std::unique_ptr<google::protobuf::MessageLite> response;

  ASSERT_TRUE(InvokeMethod(store, 1, request, &response).ok());  // "delete"
  const auto& status_message = static_cast<const golden::v1::Status&>(*response);
  EXPECT_EQ(status_message.code(), 7);
  EXPECT_EQ(status_message.text(), "deleted x");

  EXPECT_EQ(InvokeMethod(store, 2, request, &response), absl::NotFoundError("delete_ called"));
  EXPECT_EQ(InvokeMethod(store, 3, golden::common::Ping(), &response),
            absl::AbortedError("Stub_ called"));
  golden::v1::Outer::Inner inner;
  inner.set_text("t");
  EXPECT_EQ(InvokeMethod(store, 4, inner, &response),
            absl::InvalidArgumentError("Service_ called with t"));
  EXPECT_EQ(InvokeMethod(store, 5, request, &response), absl::OutOfRangeError("NewStub_ called"));
  EXPECT_EQ(InvokeMethod(store, 6, request, &response), absl::DataLossError("async_ called"));
  EXPECT_EQ(InvokeMethod(store, 7, request, &response),
            absl::PermissionDeniedError("Store_ called"));
}

class AdminImpl final : public Admin::Service {
 public:
  absl::Status class_(rdmarpc::ServerContext*, const golden::common::Empty&,
                      golden::common::Empty*) override {
    return absl::CancelledError("class_ called");
  }
  absl::Status new_(rdmarpc::ServerContext*, const golden::common::Ping& request,
                    golden::common::Ping* response) override {
    response->set_text("new " + request.text());
    return absl::OkStatus();
  }
};

TEST(GeneratedService, KeywordMethodsOfSecondServiceAreCallable) {
  AdminImpl admin;
  std::unique_ptr<google::protobuf::MessageLite> response;
  EXPECT_EQ(InvokeMethod(admin, 0, golden::common::Empty(), &response),
            absl::CancelledError("class_ called"));
  golden::common::Ping ping;
  ping.set_text("p");
  ASSERT_TRUE(InvokeMethod(admin, 1, ping, &response).ok());
  EXPECT_EQ(static_cast<const golden::common::Ping&>(*response).text(), "new p");
  // Not overridden.
  EXPECT_EQ(InvokeMethod(admin, 2, ping, &response).code(), absl::StatusCode::kUnimplemented);
}

TEST(GeneratedService, FileWithoutPackageUsesGlobalNamespace) {
  ::Notes::Service notes;
  EXPECT_EQ(notes.full_name(), "Notes");
  EXPECT_EQ(MethodNames(notes), (std::vector<std::string>{"/Notes/Add"}));
  ::Bare::Service bare;
  EXPECT_EQ(bare.full_name(), "Bare");
  EXPECT_TRUE(bare.methods().empty());
}

namespace service_names {

class StubImpl final : public ::golden::names::Stub_::Service {
 public:
  absl::Status Stub__(rdmarpc::ServerContext*, const golden::names::M&,
                      golden::names::M*) override {
    return absl::AbortedError("Stub__ called");
  }
};

TEST(GeneratedService, ServicesNamedLikeGeneratedClassesOrKeywords) {
  ::golden::names::Service_::Service service;
  EXPECT_EQ(service.full_name(), "golden.names.Service");
  EXPECT_EQ(MethodNames(service), (std::vector<std::string>{"/golden.names.Service/Service"}));

  ::golden::names::delete_::Service deleter;
  EXPECT_EQ(std::string(::golden::names::delete_::service_full_name), "golden.names.delete");
  EXPECT_EQ(MethodNames(deleter), (std::vector<std::string>{"/golden.names.delete/delete"}));

  // In class Stub_, "Stub" and "Stub_" are both reserved (the service's
  // .proto and C++ names): "Stub" -> Stub__, then "Stub_" -> Stub___.
  StubImpl stub_service;
  EXPECT_EQ(MethodNames(stub_service),
            (std::vector<std::string>{"/golden.names.Stub/Stub", "/golden.names.Stub/Stub_"}));
  std::unique_ptr<google::protobuf::MessageLite> response;
  EXPECT_EQ(InvokeMethod(stub_service, 0, golden::names::M(), &response),
            absl::AbortedError("Stub__ called"));
  EXPECT_EQ(InvokeMethod(stub_service, 1, golden::names::M(), &response).code(),
            absl::StatusCode::kUnimplemented);

  // Service StubInterface is class StubInterface_, with methods
  // StubInterface__ and async_interface_.
  ::golden::names::StubInterface_::Service interface_service;
  EXPECT_EQ(interface_service.full_name(), "golden.names.StubInterface");
  EXPECT_EQ(MethodNames(interface_service),
            (std::vector<std::string>{"/golden.names.StubInterface/StubInterface",
                                      "/golden.names.StubInterface/async_interface"}));
}

}  // namespace service_names
}  // namespace
