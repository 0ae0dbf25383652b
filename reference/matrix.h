// Matrix types. Activations are row-major [tokens, features], as are weights in Hugging Face
// checkpoints ([out_features, in_features]), so y = x * W^T maps without copies.
// The reference computes in double (MatrixRMd); logits leave it as float (MatrixRM).
#pragma once

#include <Eigen/Core>

namespace kvcheck {

using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixRMd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace kvcheck
