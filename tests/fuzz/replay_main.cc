// replay_main.cc: runs a fuzz target's LLVMFuzzerTestOneInput once on each
// file named on the command line (a directory: each file in it), so the
// seed corpus is a regression test in the ordinary build (GCC, ASan +
// UBSan), without libFuzzer. The clang build links libFuzzer instead
// (-fsanitize=fuzzer) and this file is not used.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int RunFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot open %s\n", path.c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st {};
    if (stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (RunFile(argv[i]) != 0) return 1;
      ++files;
      continue;
    }
    DIR* dir = opendir(argv[i]);
    if (dir == nullptr) return 1;
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (RunFile(std::string(argv[i]) + "/" + name) != 0) return 1;
      ++files;
    }
    closedir(dir);
  }
  if (files == 0) {
    std::fprintf(stderr, "replay: no input (a corpus with no file tests nothing)\n");
    return 1;
  }
  std::printf("replay: %d inputs, no crash\n", files);
  return 0;
}
