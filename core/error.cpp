#include "core/error.h"

#include <utility>

namespace ringgrad {
namespace {
std::string& label_storage() {
  static std::string label;  // written once by dist::init, before any thread that reads it exists
  return label;
}
}  // namespace

void set_rank_label(std::string label) { label_storage() = std::move(label); }
const std::string& rank_label() { return label_storage(); }

}  // namespace ringgrad
