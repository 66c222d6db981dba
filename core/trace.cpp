#include "core/trace.h"

#include <chrono>
#include <cstdio>
#include <fstream>

#include "core/error.h"

namespace ringgrad {

double trace_clock_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    RG_CHECK(out.good(), "write_chrome_trace", "cannot create ", tmp);
    out << "{\"traceEvents\": [\n";
    for (size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& e = events[i];
      char times[96];
      std::snprintf(times, sizeof times, "\"ts\": %.3f, \"dur\": %.3f", e.start_us, e.duration_us);
      out << "  {\"name\": " << json_string(e.name) << ", \"cat\": " << json_string(e.category)
          << ", \"ph\": \"X\", \"pid\": " << e.pid << ", \"tid\": " << json_string(e.thread) << ", " << times
          << ", \"args\": {" << e.args_json << "}}" << (i + 1 < events.size() ? ",\n" : "\n");
    }
    out << "]}\n";
    out.flush();
    RG_CHECK(out.good(), "write_chrome_trace", "writing ", tmp, " failed");
  }
  RG_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "write_chrome_trace", "renaming ", tmp, " to ", path,
           " failed");
}

}  // namespace ringgrad
