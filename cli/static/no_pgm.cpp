// OpenPGM switched off for a statically linked libzmq (docs/adr/0032).
//
// libzmq calls pgm_init() from every zmq_ctx_new(), and OpenPGM's init looks
// up the "pgm" protocol through the name service switch: on Debian that
// searches a dozen directories for libnss_db.so.2 and reads /etc/protocols,
// about 0.65 ms of every `cq` command. cq never opens a pgm:// or epgm://
// endpoint (a DEALER socket cannot), so these stand in for the five symbols
// of OpenPGM's engine.c: the rest of libpgm.a links as before.
extern "C" {

struct pgm_error_t;

bool pgm_init(pgm_error_t** error) {
  if (error)
    *error = nullptr;
  return true;
}

bool pgm_shutdown(void) {
  return true;
}

bool pgm_supported(void) {
  return false;
}

void pgm_drop_superuser(void) {}

// IANA's number for PGM, which engine.c would have looked up.
int pgm_ipproto_pgm = 113;

} // extern "C"
