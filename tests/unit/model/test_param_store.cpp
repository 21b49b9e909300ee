// GPT's parameter hook (model/param_store.h): a store that holds at most TWO
// blocks at once (as ZeRO-3's gathered block buffers) and serves everything
// from its own copies, the model's flat params zeroed meanwhile, gives
// bitwise the flat model's losses and gradients: for GPT-2 and Llama (tied
// and untied), under every recompute policy, in training, forward-only and
// span scoring. And the model announces blocks in the documented order
// (forward 0..L-1, backward L-1..0) before reading them, so two buffers
// suffice: a read of a block not held is counted as a miss.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "testing/tiny_model.h"

using namespace ratchet;

namespace {

// Block l is "gathered" into buffer l % 2 (a copy from the store's host
// image); the rest lives in its own buffer.
class TwoBlockStore final : public ParamStore {
 public:
  TwoBlockStore(Backend& be, const GPTConfig& cfg, const std::vector<char>& image)
      : be_(be), layout_(cfg), L_(cfg.num_layers), sb_(be.storage_bytes()), image_(image) {
    for (int i = P_LN1W; i <= P_FCPROJB; i++) {
      pos_[i] = block_elems_;
      block_elems_ += layout_.per_layer(i, L_);
    }
    for (int k = 0; k < 2; k++) buf_[k] = be_.alloc(std::max<size_t>(1, block_elems_) * sb_);
    rest_ = be_.alloc(layout_.total * sb_);  // simple: rest tensors at their flat offsets
    for (int i = 0; i < kNumParamTensors; i++)
      if (i < P_LN1W || i > P_FCPROJB)
        be_.upload_bytes(static_cast<char*>(rest_) + layout_.offsets[i] * sb_,
                         image_.data() + layout_.offsets[i] * sb_, layout_.sizes[i] * sb_);
  }
  ~TwoBlockStore() override {
    for (void* b : buf_) be_.release(b);
    be_.release(rest_);
  }
  cdptr param(int i, int layer) override {
    if (i < P_LN1W || i > P_FCPROJB) return static_cast<const char*>(rest_) + layout_.offsets[i] * sb_;
    const int k = layer % 2;
    if (held_[k] != layer) {
      misses++;
      return rest_;  // wrong values (and the test fails on the miss count too)
    }
    return static_cast<const char*>(buf_[k]) + pos_[i] * sb_;
  }
  void forward_block(int l) override {
    order += "F" + std::to_string(l);
    load(l);
    if (l + 1 < L_) load(l + 1);  // the fused norm reads l+1's ln1 (the prefetch)
  }
  void backward_block(int l) override {
    order += "B" + std::to_string(l);
    load(l);
    if (l > 0) load(l - 1);
  }
  int misses = 0, loads = 0;
  std::string order;

 private:
  void load(int l) {
    const int k = l % 2;
    if (held_[k] == l) return;
    for (int i = P_LN1W; i <= P_FCPROJB; i++) {
      const size_t n = layout_.per_layer(i, L_);
      be_.upload_bytes(static_cast<char*>(buf_[k]) + pos_[i] * sb_,
                       image_.data() + (layout_.offsets[i] + (size_t)l * n) * sb_, n * sb_);
    }
    held_[k] = l;
    loads++;
  }
  Backend& be_;
  ParamLayout layout_;
  int L_;
  size_t sb_;
  std::vector<char> image_;
  size_t pos_[kNumParamTensors] = {};
  size_t block_elems_ = 0;
  void* buf_[2] = {nullptr, nullptr};
  void* rest_ = nullptr;
  int held_[2] = {-1, -1};
};

std::string expected_order(int L, bool backward) {
  std::string s;
  for (int l = 0; l < L; l++) s += "F" + std::to_string(l);
  if (backward)
    for (int l = L - 1; l >= 0; l--) s += "B" + std::to_string(l);
  return s;
}

void check_config(const GPTConfig& cfg, const std::string& what) {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  const int B = 2, T = 8;
  const auto in = ratchet::testing::random_tokens(B * T, cfg.vocab_size, 5);
  const auto tg = ratchet::testing::random_tokens(B * T, cfg.vocab_size, 6);
  for (const Recompute& rp : standard_recompute_policies()) {
    SCOPED_TRACE(what + " recompute " + rp.name());
    GPT ref(cfg, *be), m(cfg, *be);
    ref.init_random(42);
    m.init_random(42);
    ref.set_recompute(rp);
    m.set_recompute(rp);
    const size_t P = m.num_params(), sb = be->storage_bytes();
    std::vector<char> image(P * sb);
    be->download_bytes(image.data(), m.params(), image.size());
    TwoBlockStore store(*be, cfg, image);
    be->zero(m.params(), P * sb);  // any read of the flat params now gives other values
    m.set_param_store(&store);
    // Two micro-batches (the second accumulates).
    for (int mb = 0; mb < 2; mb++) {
      store.order.clear();
      const float a = ref.forward_backward(in.data(), tg.data(), B, T, 0.5f);
      const float b = m.forward_backward(in.data(), tg.data(), B, T, 0.5f);
      EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "loss " << a << " vs " << b;
      EXPECT_EQ(store.order, expected_order(cfg.num_layers, true));
    }
    std::vector<float> ga(P), gb(P);
    ref.get_grads(ga.data());
    m.get_grads(gb.data());
    EXPECT_EQ(std::memcmp(ga.data(), gb.data(), P * sizeof(float)), 0) << "gradients differ";
    store.order.clear();
    const float fa = ref.forward(in.data(), tg.data(), B, T);
    const float fb = m.forward(in.data(), tg.data(), B, T);
    EXPECT_EQ(std::memcmp(&fa, &fb, sizeof fa), 0);
    EXPECT_EQ(store.order, expected_order(cfg.num_layers, false));
    const std::vector<GPT::Span> spans = {{0, 2, 3}, {1, 5, 2}};
    const std::vector<int32_t> st = {1, 2, 3, 4, 5};
    std::vector<float> la(5), lb(5);
    ref.forward_spans(in.data(), B, T, spans, st.data(), la.data());
    m.forward_spans(in.data(), B, T, spans, st.data(), lb.data());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
    EXPECT_EQ(store.misses, 0) << "a block was read while not held";
    EXPECT_GT(store.loads, 0);
    m.set_param_store(nullptr);
  }
}

TEST(ParamStore, Gpt2TwoBlocksAtATimeIsBitwiseTheFlatModel) {
  check_config(ratchet::testing::tiny_config(3, 2, 16), "gpt2");
}

TEST(ParamStore, LlamaTwoBlocksAtATimeIsBitwiseTheFlatModel) {
  check_config(ratchet::testing::tiny_llama_config(false, 3), "llama untied");
  check_config(ratchet::testing::tiny_llama_config(true, 3), "llama tied");
}

// The check has teeth: a store that holds ONE block (no room for l+1's ln1,
// which block l's fused residual + norm reads) misses.
class OneBlockStore final : public ParamStore {
 public:
  explicit OneBlockStore(GPT& m) : m_(m), layout_(m.config()) {}
  cdptr param(int i, int layer) override {
    if (i >= P_LN1W && i <= P_FCPROJB && layer != held_) misses++;
    const size_t off = layout_.offsets[i] + (size_t)layer * layout_.per_layer(i, m_.config().num_layers);
    return static_cast<const char*>(flat_) + off * m_.backend().storage_bytes();
  }
  void forward_block(int l) override { held_ = l; }
  void backward_block(int l) override { held_ = l; }
  const void* flat_ = nullptr;
  int misses = 0;

 private:
  GPT& m_;
  ParamLayout layout_;
  int held_ = -1;
};

TEST(ParamStore, BlockForwardReadsTheNextBlocksNorm) {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  const GPTConfig cfg = ratchet::testing::tiny_config(3, 2, 16);
  GPT m(cfg, *be);
  m.init_random(1);
  OneBlockStore s(m);
  s.flat_ = m.params();
  m.set_param_store(&s);
  const auto in = ratchet::testing::random_tokens(8, cfg.vocab_size, 5);
  m.forward(in.data(), in.data(), 1, 8);
  // Blocks 0 and 1 read ln1w and ln1b of blocks 1 and 2.
  EXPECT_EQ(s.misses, 4);
  m.set_param_store(nullptr);
}

}  // namespace
