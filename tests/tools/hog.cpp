// cq-test-hog BYTES READY_FILE: holds BYTES of touched anonymous memory
// outside cq, writes READY_FILE once every page is resident, then waits to
// be killed. Integration tests use it to move MemAvailable quickly: pushing
// gigabytes through a pipe (head | tail) took minutes on slow machines.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cq-test-hog BYTES READY_FILE\n");
    return 2;
  }
  char* end = nullptr;
  errno = 0;
  auto bytes = std::strtoull(argv[1], &end, 10);
  if (errno != 0 || end == argv[1] || *end != '\0' || bytes == 0) {
    std::fprintf(stderr, "cq-test-hog: BYTES must be a positive integer, not '%s'\n", argv[1]);
    return 2;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "cq-test-hog: mmap %llu bytes: %s\n", bytes, std::strerror(errno));
    return 1;
  }
  // Nonzero bytes, so no page can stay shared with the zero page.
  std::memset(p, 1, bytes);
  std::string ready = argv[2];
  auto tmp = ready + ".tmp";
  auto* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr || std::fprintf(f, "%d\n", static_cast<int>(getpid())) < 0 ||
      std::fclose(f) != 0 || std::rename(tmp.c_str(), ready.c_str()) != 0) {
    std::fprintf(stderr, "cq-test-hog: cannot write %s\n", ready.c_str());
    return 1;
  }
  for (;;)
    pause();
}
