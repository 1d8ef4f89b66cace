// Static and dynamic INT8 quantization (filled in by the quantization work).
#include "internal.h"
