// Replays a fuzz target's seed corpus (and every crash input kept as a
// regression) through its LLVMFuzzerTestOneInput, so that `bazel test` runs
// every fuzz target on every input in the tree with the normal compiler.
// libFuzzer itself (clang, -fsanitize=fuzzer) is driven by tools/fuzz.sh.
//
// Usage: replay DIR_OR_FILE...  Exits non-zero when an argument cannot be
// read or holds no input at all (a corpus that silently vanished would
// otherwise make the test pass without testing anything).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool ListInputs(const std::string& path, std::vector<std::string>* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  if (!S_ISDIR(st.st_mode)) {
    out->push_back(path);
    return true;
  }
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return false;
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    names.push_back(path + "/" + name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    if (!ListInputs(n, out)) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!ListInputs(argv[i], &inputs)) {
      std::fprintf(stderr, "replay: cannot read %s\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs\n");
    return 2;
  }
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  // The last line is read by tools/sum_test_xml.py's neighbours: one line a
  // target, so a reader sees how much was replayed.
  std::printf("replayed %zu inputs\n", inputs.size());
  return 0;
}
