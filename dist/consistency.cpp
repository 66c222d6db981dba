#include "dist/consistency.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/ops.h"

namespace ringgrad::dist {

std::vector<std::string> allgather_strings(ProcessGroup& group, const std::string& mine) {
  const int N = group.size();
  Tensor length = from_vector(std::vector<int64_t>{static_cast<int64_t>(mine.size())}, {1}, {.dtype = DType::i64});
  Tensor lengths = zeros({N, 1}, {.dtype = DType::i64});
  group.allgather(lengths, length)->wait();
  std::vector<int64_t> sizes;
  int64_t longest = 0;
  for (double v : lengths.to_vector()) {
    sizes.push_back(static_cast<int64_t>(v));
    longest = std::max(longest, sizes.back());
  }
  Tensor bytes = zeros({longest}, {.dtype = DType::u8});
  std::copy(mine.begin(), mine.end(), static_cast<char*>(bytes.raw_data()));
  Tensor all = zeros({N, longest}, {.dtype = DType::u8});
  group.allgather(all, bytes)->wait();
  std::vector<std::string> out;
  const char* base = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < N; ++r) out.emplace_back(base + r * longest, static_cast<size_t>(sizes[r]));
  return out;
}

void check_same_settings(ProcessGroup& group, const std::string& what, const Settings& settings) {
  // One line per setting; a value's own newlines would shift the lines, so they are escaped.
  std::string mine;
  for (const auto& [name, value] : settings) {
    std::string escaped;
    for (char ch : value) escaped += ch == '\n' ? std::string("\\n") : std::string(1, ch);
    mine += name + "=" + escaped + "\n";
  }
  const std::vector<std::string> all = allgather_strings(group, mine);
  if (std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all[0]; })) return;
  // Per setting: the ranks holding each value.
  std::vector<std::vector<std::string>> lines(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    std::string line;
    for (char ch : all[r]) {
      if (ch == '\n') {
        lines[r].push_back(line);
        line.clear();
      } else {
        line += ch;
      }
    }
  }
  std::string differences;
  for (size_t i = 0; i < settings.size(); ++i) {
    std::map<std::string, std::vector<size_t>> holders;
    for (size_t r = 0; r < lines.size(); ++r)
      holders[i < lines[r].size() ? lines[r][i] : std::string("(none)")].push_back(r);
    if (holders.size() == 1) continue;
    differences += "\n ";
    for (const auto& [line, ranks] : holders) {
      differences += str_cat(" ", ranks.size() == 1 ? "rank " : "ranks ");
      for (size_t k = 0; k < ranks.size() && k < 8; ++k) differences += str_cat(k ? "," : "", ranks[k]);
      if (ranks.size() > 8) differences += ",...";
      differences += str_cat(" ", line, ";");
    }
    differences.pop_back();
  }
  RG_FAIL("dist.check_same_settings", what, " differ between ranks (seen by rank ", group.rank(), "/", group.size(),
          "):", differences.empty() ? std::string("\n  (the ranks passed different settings lists)") : differences,
          "\nEvery rank must be started with the same settings.");
}

}  // namespace ringgrad::dist
