// House rule (kernels/cuda/launch.cuh, docs/cuda.md): every kernel launch in kernels/cuda goes
// through MINIDL_LAUNCH, which launches and then checks the launch. The only `<<<...>>>` is the
// one inside launch.cuh's launch_kernel; the same sources are also built against a simulated
// CUDA runtime, where `<<<` does not compile.
// This test reads the sources (it needs no GPU) and fails on any `<<<` in kernels/cuda outside
// that function (comments and string literals excluded), naming the file and line.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

// Where the one real launch lives: the body of launch_kernel in launch.cuh, as [begin, end) of
// `text` (comments already blanked); {npos, npos} when it is not there.
std::pair<size_t, size_t> launch_kernel_body(const std::string& text) {
  const size_t name = text.find("void launch_kernel(");
  if (name == std::string::npos) return {std::string::npos, std::string::npos};
  size_t pos = name + std::string("void launch_kernel").size();
  int depth = 0;  // skip the parameter list, which may hold parentheses of its own
  for (; pos < text.size(); ++pos) {
    if (text[pos] == '(') ++depth;
    if (text[pos] == ')' && --depth == 0) break;
  }
  const size_t open = text.find('{', pos);
  if (open == std::string::npos) return {std::string::npos, std::string::npos};
  depth = 0;
  for (size_t end = open; end < text.size(); ++end) {
    if (text[end] == '{') ++depth;
    if (text[end] == '}' && --depth == 0) return {open, end + 1};
  }
  return {std::string::npos, std::string::npos};
}

// "file:line" of every `<<<` in `text` that is not inside launch.cuh's launch_kernel.
std::vector<std::string> stray_launches(const std::string& name, const std::string& raw) {
  const std::string text = strip_comments(raw);
  const auto [begin, end] =
      name == "launch.cuh" ? launch_kernel_body(text) : std::pair{std::string::npos, std::string::npos};
  std::vector<std::string> bad;
  for (size_t pos = text.find("<<<"); pos != std::string::npos; pos = text.find("<<<", pos + 3)) {
    if (begin != std::string::npos && pos > begin && pos < end) continue;
    const auto line = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n') + 1;
    bad.push_back(name + ":" + std::to_string(line));
  }
  return bad;
}

}  // namespace

TEST_CASE("the launch scanner flags <<< outside launch_kernel and accepts MINIDL_LAUNCH", "[kernels][cuda-source]") {
  CHECK(stray_launches("a.cu", "MINIDL_LAUNCH(k<2, F>, g, b, 0, s, x,\n              f(y));\n").empty());
  CHECK(stray_launches("b.cu", "int a;\nk<<<1, 2>>>(x);\nMINIDL_LAUNCH_CHECK();\n") ==
        std::vector<std::string>{"b.cu:2"});  // a checked <<< is still a stray one
  CHECK(stray_launches("c.cu", "// k<<<1, 2>>>(x); in a comment\n/* k<<<1, 2>>>(x); */ auto s = \"<<<\";\n").empty());
  const std::string helper =
      "template <class... P>\nvoid launch_kernel(const char* file, int line, void (*kernel)(P...), dim3 g) {\n"
      "#if defined(__CUDACC__)\n  kernel<<<g, 1>>>();\n#else\n  { sim(kernel); }\n#endif\n  check(file, line);\n}\n";
  CHECK(stray_launches("launch.cuh", helper).empty());
  CHECK(stray_launches("launch.cuh", helper + "void other() { k<<<1, 1>>>(); }\n") ==
        std::vector<std::string>{"launch.cuh:10"});
  CHECK(stray_launches("launch.cuh", "void f() { k<<<1, 1>>>(); }\n" + helper) ==
        std::vector<std::string>{"launch.cuh:1"});
  CHECK(stray_launches("d.cu", helper) == std::vector<std::string>{"d.cu:4"});  // the exemption is launch.cuh's only
}

TEST_CASE("every kernel launch under kernels/cuda goes through MINIDL_LAUNCH", "[kernels][cuda-source]") {
  const fs::path dir = fs::path(MINIDL_SOURCE_DIR) / "kernels" / "cuda";
  REQUIRE(fs::is_directory(dir));
  int files = 0, launches = 0, helper_launches = 0;
  std::vector<std::string> bad;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {  // kernels/cuda and its family folders
    const std::string ext = entry.path().extension().string();
    if (ext != ".cu" && ext != ".cuh" && ext != ".h" && ext != ".cpp") continue;
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string name = entry.path().filename().string();
    const std::string text = strip_comments(ss.str());
    if (name != "launch.cuh") {
      for (size_t p = text.find("MINIDL_LAUNCH("); p != std::string::npos; p = text.find("MINIDL_LAUNCH(", p + 1))
        ++launches;
    } else {
      const auto [begin, end] = launch_kernel_body(text);
      for (size_t p = text.find("<<<"); p != std::string::npos; p = text.find("<<<", p + 3))
        if (begin != std::string::npos && p > begin && p < end) ++helper_launches;
    }
    for (auto& b : stray_launches(name, ss.str())) bad.push_back(b);
    ++files;
  }
  std::string listed;
  for (const auto& b : bad) listed += " " + b;
  INFO("<<< outside launch.cuh's launch_kernel (launch with MINIDL_LAUNCH instead):" << listed);
  CHECK(files > 0);
  CHECK(launches > 0);          // the scan saw the sources' launches
  CHECK(helper_launches == 1);  // and the helper's one <<<
  CHECK(bad.empty());
}
