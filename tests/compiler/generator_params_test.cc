// Parameter parsing of protoc-gen-rdmarpc (compiler/generator_params.h).
#include "generator_params.h"

#include <string>

#include "gtest/gtest.h"

namespace rdmarpc {
namespace compiler {
namespace {

TEST(ParseGeneratorParams, EmptyGivesDefaults) {
  GeneratorParams params;
  params.include_prefix = "stale/";
  std::string error;
  ASSERT_TRUE(ParseGeneratorParams("", &params, &error));
  EXPECT_EQ(params.include_prefix, "");
  EXPECT_EQ(error, "");
}

TEST(ParseGeneratorParams, IncludePrefixGetsTrailingSlash) {
  GeneratorParams params;
  std::string error;
  ASSERT_TRUE(ParseGeneratorParams("include_prefix=gen/proto", &params, &error));
  EXPECT_EQ(params.include_prefix, "gen/proto/");
  ASSERT_TRUE(ParseGeneratorParams("include_prefix=gen/", &params, &error));
  EXPECT_EQ(params.include_prefix, "gen/");
}

TEST(ParseGeneratorParams, RejectsUnknownParameterByName) {
  GeneratorParams params;
  std::string error;
  EXPECT_FALSE(ParseGeneratorParams("bogus", &params, &error));
  EXPECT_EQ(error, "unknown parameter 'bogus' (protoc-gen-rdmarpc accepts: include_prefix=DIR)");
}

TEST(ParseGeneratorParams, RejectsUnknownAfterKnownAndLeavesParamsAlone) {
  GeneratorParams params;
  std::string error;
  EXPECT_FALSE(ParseGeneratorParams("include_prefix=x,lite=true", &params, &error));
  EXPECT_EQ(error, "unknown parameter 'lite' (protoc-gen-rdmarpc accepts: include_prefix=DIR)");
  EXPECT_EQ(params.include_prefix, "");
}

}  // namespace
}  // namespace compiler
}  // namespace rdmarpc
