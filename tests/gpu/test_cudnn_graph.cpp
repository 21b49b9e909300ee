// --attention cudnn without a GPU (label unit; built when cuDNN is): every
// tensor and operation descriptor of the forward and backward graphs is
// finalized by the real cuDNN library, which validates their types, modes and
// inputs on the host; unsupported shapes are refused with a message. The
// operation graph, heuristics and plans need a device: test_cudnn_attention.cpp.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/cudnn_attention.h"
#include "core/error.h"

namespace {

using ratchet::cuda::SdpaShape;

// ---- without a device ---------------------------------------------------------------------

// Forward: Q K^T, scale, 4 causal-mask ops, max, sub, exp, sum, log, stats
// add, div, P V. Backward MHA: 3 (rowsum(dO*O)) + 8 (P) + 2 (dV) + 5 (dS)
// + 2 (dK) + 3 (dQ: reshape K, dS K into the FP32 accumulator, identity into
// dQ); the deterministic backward (the default) writes dS K straight into dQ:
// one op less, and no accumulator tensor. GQA adds a head-group sum to dK and
// to dV.
TEST(CudnnGraph, DescriptorsFinalizeInCudnn) {
  for (SdpaShape s : {SdpaShape{2, 7, 4, 4, 64}, SdpaShape{8, 1024, 12, 12, 64},
                      SdpaShape{1, 129, 2, 2, 128}, SdpaShape{2, 65, 8, 2, 64}}) {
    SCOPED_TRACE("T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
                 " KV=" + std::to_string(s.KV) + " HS=" + std::to_string(s.HS));
    EXPECT_EQ(ratchet::cuda::cudnn_attention_graph_ops(s, false), 14);
    EXPECT_EQ(ratchet::cuda::cudnn_attention_graph_ops(s, true, false), s.KV == s.NH ? 23 : 25);
    EXPECT_EQ(ratchet::cuda::cudnn_attention_graph_ops(s, true, true), s.KV == s.NH ? 22 : 24);
  }
}

// A sliding window W < T adds the band's left bound to the scores both graphs
// share: GEN_INDEX row and column, column + W, CMP_GT, BINARY_SELECT (5 ops);
// each finalizes in cuDNN (the window a by-value FLOAT scalar, the frontend's
// type). W >= T is plain causal attention: the same graph as no window.
TEST(CudnnGraph, AWindowAddsTheBandsLeftBound) {
  for (SdpaShape s : {SdpaShape{2, 65, 8, 2, 64, 16}, SdpaShape{1, 129, 2, 2, 128, 1},
                      SdpaShape{2, 1024, 12, 12, 64, 256}}) {
    SCOPED_TRACE("T=" + std::to_string(s.T) + " KV=" + std::to_string(s.KV) +
                 " window=" + std::to_string(s.window));
    SdpaShape plain = s;
    plain.window = 0;
    for (bool bwd : {false, true})
      for (bool det : {false, true})
        EXPECT_EQ(ratchet::cuda::cudnn_attention_graph_ops(s, bwd, det),
                  ratchet::cuda::cudnn_attention_graph_ops(plain, bwd, det) + 5);
    SdpaShape wide = s;
    wide.window = s.T;
    EXPECT_EQ(wide.band(), 0);
    EXPECT_EQ(ratchet::cuda::cudnn_attention_graph_ops(wide, true),
              ratchet::cuda::cudnn_attention_graph_ops(plain, true));
  }
}

TEST(CudnnGraph, UnsupportedShapesAreRefusedWithAMessage) {
  struct Bad {
    SdpaShape s;
    const char* says;
  };
  for (const Bad& b : {Bad{{2, 8, 4, 4, 36}, "multiple of 8"}, Bad{{2, 8, 2, 2, 256}, "at most 128"},
                       Bad{{2, 8, 6, 4, 64}, "divide"}}) {
    try {
      ratchet::cuda::cudnn_attention_graph_ops(b.s, false);
      ADD_FAILURE() << "head size " << b.s.HS << " / kv " << b.s.KV << " accepted";
    } catch (const ratchet::Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--attention cudnn"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
