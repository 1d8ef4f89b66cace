// The torchspeed:: graph ops each kernel file defines, added to the library's one registration
// (ops.cpp). Not part of the C ABI.
#pragma once

namespace torch {
class Library;
}  // namespace torch

namespace tsfast {
void register_qdq(torch::Library& m);   // quantize_per_tensor, dequantize (fastqdq.cpp)
void register_qadd(torch::Library& m);  // add, add_relu (fastqadd.cpp)
}  // namespace tsfast

namespace tsimpl {
void register_linear(torch::Library& m);    // linear_packed (fastlinear.cpp)
void register_conv(torch::Library& m);      // conv2d_gemm, conv_dw (fastconv.cpp)
void register_conv_pool(torch::Library& m);  // conv2d_pool (fastconvsmall.cpp)
void register_encoder(torch::Library& m);   // transformer_encoder_layer (fastencoder.cpp)
void register_lstm(torch::Library& m);      // lstm (fastlstm.cpp)
void register_conv_add(torch::Library& m);  // conv2d_add (fastqconv.cpp, built with TS_HAVE_CONV_ADD)
// MkldnnConstant, mkldnn_constant, mkldnn_broadcast, mkldnn_hardtanh_ (mkldnnserve.cpp, built with TS_HAVE_MKLDNN_SERVE)
void register_mkldnn_serve(torch::Library& m);
}  // namespace tsimpl
