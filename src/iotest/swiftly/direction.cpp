#include "iotest/swiftly/direction.hpp"

#include "iotest/common/errors.hpp"

namespace iotest::swiftly {

Direction parse_direction(const std::string& text) {
  if (text == "predict") return Direction::predict;
  if (text == "image") return Direction::image;
  if (text == "both") return Direction::both;
  throw UsageError("--direction", "expected predict, image or both, got '" + text + "'");
}

std::string to_string(Direction d) {
  switch (d) {
    case Direction::predict:
      return "predict";
    case Direction::image:
      return "image";
    case Direction::both:
      return "both";
  }
  return "?";
}

}  // namespace iotest::swiftly
