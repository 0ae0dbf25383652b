// Error messages for values a quantizer cannot store.
#include "kernels/quant_errors.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kernels/quant_math.h"
#include "reference/errors.h"

namespace kvcheck {

void throw_if_unquantizable(const float* x, std::int64_t tokens, std::int64_t head_dim, const KvLocation& at,
                            const char* format, bool fp16_zero) {
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t c = 0; c < head_dim; ++c) {
      const float v = x[t * head_dim + c];
      const bool finite = quant::is_finite(v);
      if (finite && (!fp16_zero || v >= -quant::kF16Max)) continue;
      const std::string where = fmt::format("quantize {} ({})", at.tensor, format);
      const std::string what =
          fmt::format("layer {}, head {}, token {}, channel {}", at.layer, at.head, at.first_token + t, c);
      if (std::isnan(v)) throw input_error(where, what, "NaN cannot be quantized (rejected, nothing stored)");
      if (!finite) throw input_error(where, what, "{}inf cannot be quantized (rejected, nothing stored)", v < 0 ? "-" : "+");
      throw input_error(where, what,
                        "{} is below -65504: the zero point (the group minimum rounded down to fp16) cannot hold it",
                        v);
    }
  }
}

}  // namespace kvcheck
