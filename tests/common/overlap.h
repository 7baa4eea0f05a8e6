#pragma once
// The message validate() gives for an output that overlaps another tensor (docs/spec.md section 9), rebuilt from
// the views, so the alias tests of every operation compare against one statement of it.

#include <string>

#include "mlakit/types.h"

namespace mlakit::test {

/// "[begin, end)" of a view with non-negative strides, as validate() prints it.
std::string byte_span(const TensorView& t);

/// "<out>: overlaps <in> (bytes [..) and [..)): <rule>".
std::string overlap(const std::string& out, const TensorView& a, const std::string& in, const TensorView& b,
                    const std::string& rule = "outputs must not alias inputs");

}  // namespace mlakit::test
