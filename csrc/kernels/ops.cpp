// The torchspeed:: op namespace, registered once. Its own translation unit, linked into
// libtorchspeed.so and into libtorchspeed_ops.so (the ops alone, for stock libtorch processes;
// never loaded beside libtorchspeed.so): the kernels' static library also goes into the test
// library (csrc/testing), which loads beside libtorchspeed.so and must not register the ops again.
#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(torchspeed, m) {
  tsfast::register_qdq(m);
  tsfast::register_qadd(m);
  tsimpl::register_linear(m);
  tsimpl::register_conv(m);
  tsimpl::register_conv_pool(m);
  tsimpl::register_encoder(m);
  tsimpl::register_lstm(m);
#ifdef TS_HAVE_CONV_ADD
  tsimpl::register_conv_add(m);
#endif
#ifdef TS_HAVE_MKLDNN_SERVE
  tsimpl::register_mkldnn_serve(m);
#endif
}
