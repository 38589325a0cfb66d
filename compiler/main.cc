// protoc-gen-rdmarpc: protoc plugin that generates rdmarpc client stubs and
// server skeletons. protoc runs it for --rdmarpc_out=DIR; see generator.h.
#include "generator.h"
#include "google/protobuf/compiler/plugin.h"

int main(int argc, char* argv[]) {
  rdmarpc::compiler::RdmarpcGenerator generator;
  return google::protobuf::compiler::PluginMain(argc, argv, &generator);
}
