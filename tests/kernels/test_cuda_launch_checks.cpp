// House rule (kernels/cuda/cuda_check.h, docs/cuda.md): every kernel launch in kernels/cuda is
// followed by its launch check.
// This test reads the sources (it needs no GPU) and fails on any `<<<...>>>(...);` whose next
// statement is not MINIDL_LAUNCH_CHECK();, naming the file and line.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace {

// Source text with comments and string literals blanked (newlines kept, so lines still count).
std::string strip_comments(const std::string& s) {
  std::string out = s;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out.compare(i, 2, "//") == 0) {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out.compare(i, 2, "/*") == 0) {
      while (i < out.size() && out.compare(i, 2, "*/") != 0) {
        if (out[i] != '\n') out[i] = ' ';
        ++i;
      }
      if (i < out.size()) out[i] = out[i + 1] = ' ';
      ++i;
    } else if (out[i] == '"') {
      for (++i; i < out.size() && out[i] != '"'; ++i) {
        if (out[i] == '\\') out[i++] = ' ';
        out[i] = ' ';
      }
    }
  }
  return out;
}

// "file:line" of every launch in `text` that is not followed by its check.
std::vector<std::string> unchecked_launches(const std::string& name, const std::string& raw) {
  const std::string text = strip_comments(raw);
  std::vector<std::string> bad;
  for (size_t pos = text.find("<<<"); pos != std::string::npos; pos = text.find("<<<", pos + 3)) {
    const size_t close = text.find(">>>", pos);
    size_t end = close == std::string::npos ? std::string::npos : close + 3;
    int depth = 0;  // the argument list may span lines and hold parentheses
    for (; end != std::string::npos && end < text.size(); ++end) {
      if (text[end] == '(') ++depth;
      if (text[end] == ')') --depth;
      if (text[end] == ';' && depth == 0) break;
    }
    size_t next = end == std::string::npos ? end : text.find_first_not_of(" \t\r\n", end + 1);
    const std::string check = "MINIDL_LAUNCH_CHECK();";
    if (next == std::string::npos || text.compare(next, check.size(), check) != 0) {
      const auto line = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n') + 1;
      bad.push_back(name + ":" + std::to_string(line));
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("the launch scanner flags a launch without its check and accepts one with it", "[kernels][cuda-source]") {
  CHECK(unchecked_launches("a.cu", "k<<<1, 2>>>(x, f(y));\nMINIDL_LAUNCH_CHECK();\n").empty());
  CHECK(unchecked_launches("a.cu", "k<<<g, b, 0, s>>>(x,\n   y);  // launch\n  MINIDL_LAUNCH_CHECK();").empty());
  CHECK(unchecked_launches("b.cu", "int a;\nk<<<1, 2>>>(x);\nother();\nMINIDL_LAUNCH_CHECK();") ==
        std::vector<std::string>{"b.cu:2"});
  CHECK(unchecked_launches("c.cu", "// k<<<1, 2>>>(x); in a comment\n").empty());
}

TEST_CASE("every kernel launch in kernels/cuda is followed by MINIDL_LAUNCH_CHECK", "[kernels][cuda-source]") {
  const fs::path dir = fs::path(MINIDL_SOURCE_DIR) / "kernels" / "cuda";
  REQUIRE(fs::is_directory(dir));
  int files = 0, launches = 0;
  std::vector<std::string> bad;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cu" && ext != ".cuh") continue;
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = strip_comments(ss.str());
    for (size_t p = text.find("<<<"); p != std::string::npos; p = text.find("<<<", p + 3)) ++launches;
    for (auto& b : unchecked_launches(entry.path().filename().string(), ss.str())) bad.push_back(b);
    ++files;
  }
  std::string listed;
  for (const auto& b : bad) listed += " " + b;
  INFO("launches without MINIDL_LAUNCH_CHECK(); right after them:" << listed);
  CHECK(files > 0);
  CHECK(launches > 0);
  CHECK(bad.empty());
}
