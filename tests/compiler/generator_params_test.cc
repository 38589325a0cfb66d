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
  EXPECT_FALSE(params.generate_mock_code);
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
  EXPECT_EQ(error, "unknown parameter 'bogus' (protoc-gen-rdmarpc accepts: include_prefix=DIR, "
            "generate_mock_code=true|false)");
}

TEST(ParseGeneratorParams, RejectsUnknownAfterKnownAndLeavesParamsAlone) {
  GeneratorParams params;
  std::string error;
  EXPECT_FALSE(ParseGeneratorParams("include_prefix=x,lite=true", &params, &error));
  EXPECT_EQ(error, "unknown parameter 'lite' (protoc-gen-rdmarpc accepts: include_prefix=DIR, "
            "generate_mock_code=true|false)");
  EXPECT_EQ(params.include_prefix, "");
}

TEST(ParseGeneratorParams, GenerateMockCodeTakesTrueOrFalse) {
  GeneratorParams params;
  std::string error;
  ASSERT_TRUE(ParseGeneratorParams("generate_mock_code=true", &params, &error));
  EXPECT_TRUE(params.generate_mock_code);
  ASSERT_TRUE(ParseGeneratorParams("include_prefix=gen,generate_mock_code=false", &params, &error));
  EXPECT_FALSE(params.generate_mock_code);
  EXPECT_EQ(params.include_prefix, "gen/");
  ASSERT_TRUE(ParseGeneratorParams("generate_mock_code=true,include_prefix=gen", &params, &error));
  EXPECT_TRUE(params.generate_mock_code);
  EXPECT_EQ(params.include_prefix, "gen/");
}

TEST(ParseGeneratorParams, RejectsOtherGenerateMockCodeValues) {
  struct Case {
    const char* parameter;
    const char* value;  // as the error message quotes it
  };
  for (const Case& c : {Case{"generate_mock_code", ""}, Case{"generate_mock_code=1", "1"},
                        Case{"generate_mock_code=True", "True"},
                        Case{"include_prefix=x,generate_mock_code=yes", "yes"}}) {
    GeneratorParams params;
    std::string error;
    EXPECT_FALSE(ParseGeneratorParams(c.parameter, &params, &error)) << c.parameter;
    EXPECT_EQ(error, std::string("parameter generate_mock_code has value '") + c.value +
                         "'; expected true or false");
    EXPECT_FALSE(params.generate_mock_code);
    EXPECT_EQ(params.include_prefix, "");
  }
}

}  // namespace
}  // namespace compiler
}  // namespace rdmarpc
