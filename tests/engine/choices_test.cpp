// The workload's choices as types: every spelling parses back to its value, an unknown one is a
// ConfigError naming the flag and the choices, and the names batchwise knows are only its own.
// Expected spellings and messages are written out here, not read from choices.cpp.
#include "batchwise/choices.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "batchwise/error.h"

namespace batchwise {
namespace {

// The message of the ConfigError `parse` throws, or "no error".
template <typename Parse>
std::string config_error(Parse parse) {
  try {
    parse();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Choices, EverySpellingParsesBackToItsValue) {
  for (const Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp16})
    EXPECT_EQ(parse_precision(to_string(p)), p) << to_string(p);
  for (const Optimizer o : {Optimizer::Sgd, Optimizer::Adam, Optimizer::AdamW})
    EXPECT_EQ(parse_optimizer(to_string(o)), o) << to_string(o);
  for (const Loss l : {Loss::CrossEntropy, Loss::Mse}) EXPECT_EQ(parse_loss(to_string(l)), l) << to_string(l);
  for (const Backend b : {Backend::Auto, Backend::Gloo, Backend::Nccl})
    EXPECT_EQ(parse_backend(to_string(b)), b) << to_string(b);
}

// The spellings are the CLI flags' values and the report's JSON values (docs/cli.md,
// docs/report-schema.md): fixed, in declaration order.
TEST(Choices, SpellingsAreTheFlagValuesInDeclarationOrder) {
  EXPECT_STREQ(to_string(Precision::Fp32), "fp32");
  EXPECT_STREQ(to_string(Precision::Bf16), "bf16");
  EXPECT_STREQ(to_string(Precision::Fp16), "fp16");
  EXPECT_STREQ(to_string(Optimizer::Sgd), "sgd");
  EXPECT_STREQ(to_string(Optimizer::Adam), "adam");
  EXPECT_STREQ(to_string(Optimizer::AdamW), "adamw");
  EXPECT_STREQ(to_string(Loss::CrossEntropy), "cross-entropy");
  EXPECT_STREQ(to_string(Loss::Mse), "mse");
  EXPECT_STREQ(to_string(Backend::Auto), "auto");
  EXPECT_STREQ(to_string(Backend::Gloo), "gloo");
  EXPECT_STREQ(to_string(Backend::Nccl), "nccl");
  EXPECT_EQ(precision_names(), (std::vector<std::string>{"fp32", "bf16", "fp16"}));
  EXPECT_EQ(optimizer_names(), (std::vector<std::string>{"sgd", "adam", "adamw"}));
  EXPECT_EQ(loss_names(), (std::vector<std::string>{"cross-entropy", "mse"}));
}

TEST(Choices, AnUnknownValueNamesTheFlagAndTheChoices) {
  EXPECT_EQ(config_error([] { parse_optimizer("lion"); }),
            "--optimizer lion: unknown optimizer; choose one of sgd, adam, adamw");
  EXPECT_EQ(config_error([] { parse_precision("fp8"); }),
            "--precision fp8: unknown precision; choose one of fp32, bf16, fp16");
  EXPECT_EQ(config_error([] { parse_loss("hinge"); }), "--loss hinge: unknown loss; choose one of cross-entropy, mse");
  EXPECT_EQ(config_error([] { parse_backend("mpi"); }),
            "--dist-backend mpi: unknown backend; choose one of auto, gloo, nccl");
  // Spellings are exact: no case folding, no surrounding space, nothing empty.
  EXPECT_THROW(parse_optimizer("SGD"), ConfigError);
  EXPECT_THROW(parse_precision(" bf16"), ConfigError);
  EXPECT_THROW(parse_loss(""), ConfigError);
  EXPECT_THROW(parse_backend("Gloo"), ConfigError);
}

// A Workload of the user's may name any optimizer or precision; only batchwise's own are known.
TEST(Choices, KnownNamesAreOnlyBatchwisesOwn) {
  EXPECT_EQ(known_optimizer("sgd"), Optimizer::Sgd);
  EXPECT_EQ(known_optimizer("adam"), Optimizer::Adam);
  EXPECT_EQ(known_optimizer("adamw"), Optimizer::AdamW);
  for (const char* other : {"lamb", "rmsprop", "SGD", "adam ", ""})
    EXPECT_EQ(known_optimizer(other), std::nullopt) << "'" << other << "'";
  EXPECT_EQ(known_precision("fp32"), Precision::Fp32);
  EXPECT_EQ(known_precision("bf16"), Precision::Bf16);
  EXPECT_EQ(known_precision("fp16"), Precision::Fp16);
  for (const char* other : {"fp8", "int8", "mixed", "FP16", ""})
    EXPECT_EQ(known_precision(other), std::nullopt) << "'" << other << "'";
}

TEST(Choices, AdamAndAdamWAreTheAdamFamily) {
  EXPECT_FALSE(adam_family(Optimizer::Sgd));
  EXPECT_TRUE(adam_family(Optimizer::Adam));
  EXPECT_TRUE(adam_family(Optimizer::AdamW));
}

// One table of bounds for the CLI's flags and the Python API's options: each says why a value is
// out, after the value as it was written.
TEST(Choices, OptionBoundsSayWhyAValueIsOut) {
  const OptionBound* steps = find_option_bound("--steps");
  ASSERT_NE(steps, nullptr);
  EXPECT_EQ(out_of_bound(*steps, 0, "steps=0"), "steps=0: must be at least 1");
  EXPECT_EQ(out_of_bound(*steps, 5, "5"), "");
  EXPECT_EQ(out_of_bound(*find_option_bound("--advice-budget"), 0, "0"), "0: must be above 0");
  EXPECT_EQ(out_of_bound(*find_option_bound("--target"), 1.5, "1.5"),
            "1.5: must be at most 1 (a fraction of the budget)");
  EXPECT_EQ(out_of_bound(*find_option_bound("--max"), 1e12, "1e12"), "1e12: must be at most 1073741824");
  EXPECT_EQ(out_of_bound(*steps, std::nan(""), "nan"), "nan: not a finite number");
  EXPECT_EQ(find_option_bound("--model"), nullptr);
  for (const OptionBound& b : option_bounds()) EXPECT_EQ(find_option_bound(b.flag), &b) << b.flag << " twice";
}

}  // namespace
}  // namespace batchwise
