#pragma once
// Contention on purpose, for the tests that check what a measurement says of a shared CPU: a child
// process spinning on one core, killed when this goes out of scope, and dying with the test process
// if that ends first.
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace support {

// The first core this process may run on.
inline int first_allowed_core() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return 0;
  int core = 0;
  while (core < CPU_SETSIZE && !CPU_ISSET(core, &allowed)) ++core;
  return core;
}

// A busy child pinned to `core`; pid() is not positive where it could not be pinned or forked. The
// child inherits the pin: this process pins itself to `core` for the fork and then takes back its
// own cores, so a child running at all runs there.
class BusyCore {
 public:
  explicit BusyCore(int core) {
    cpu_set_t own, one;
    CPU_ZERO(&own);
    CPU_ZERO(&one);
    CPU_SET(core, &one);
    if (sched_getaffinity(0, sizeof(own), &own) != 0 || sched_setaffinity(0, sizeof(one), &one) != 0) return;
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {  // the child: spins until killed, or until its parent is gone
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(0);
      volatile unsigned long spins = 0;
      for (;;) spins = spins + 1;
    }
    sched_setaffinity(0, sizeof(own), &own);
  }
  ~BusyCore() {
    if (pid_ > 0) kill(pid_, SIGKILL), waitpid(pid_, nullptr, 0);
  }
  BusyCore(const BusyCore&) = delete;
  BusyCore& operator=(const BusyCore&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace support
