// GSSAPI switched off for a statically linked libzmq (docs/adr/0032).
//
// Debian's libzmq.a is built with GSSAPI, so its objects name these symbols
// even though only a socket with ZMQ_GSSAPI_CLIENT/SERVER set ever calls
// them, and cq never sets those options. Defining them here keeps the
// Kerberos libraries (five shared objects, about 2.7 ms of every `cq`
// start-up on a slow machine) out of the client. Should anything call one,
// it fails as GSSAPI does when no mechanism is available.
#include <gssapi/gssapi.h>

extern "C" {

#define CQ_GSS_UNAVAILABLE                                                                         \
  {                                                                                                \
    if (minor)                                                                                     \
      *minor = 0;                                                                                  \
    return GSS_S_UNAVAILABLE;                                                                      \
  }

gss_OID GSS_C_NT_HOSTBASED_SERVICE = 0;
gss_OID GSS_C_NT_USER_NAME = 0;

OM_uint32 gss_accept_sec_context(OM_uint32* minor, gss_ctx_id_t* ctx, gss_cred_id_t cred,
                                 gss_buffer_t in, gss_channel_bindings_t cb, gss_name_t* src,
                                 gss_OID* mech, gss_buffer_t out, OM_uint32* flags,
                                 OM_uint32* time_rec, gss_cred_id_t* deleg) CQ_GSS_UNAVAILABLE

    OM_uint32 gss_acquire_cred(OM_uint32* minor, gss_name_t name, OM_uint32 time_req,
                               gss_OID_set mechs, gss_cred_usage_t usage, gss_cred_id_t* cred,
                               gss_OID_set* actual, OM_uint32* time_rec) CQ_GSS_UNAVAILABLE

    OM_uint32
    gss_delete_sec_context(OM_uint32* minor, gss_ctx_id_t* ctx, gss_buffer_t out) CQ_GSS_UNAVAILABLE

    OM_uint32 gss_display_name(OM_uint32* minor, gss_name_t name, gss_buffer_t out,
                               gss_OID* type) CQ_GSS_UNAVAILABLE

    OM_uint32 gss_import_name(OM_uint32* minor, gss_buffer_t in, gss_OID type,
                              gss_name_t* out) CQ_GSS_UNAVAILABLE

    OM_uint32
    gss_init_sec_context(OM_uint32* minor, gss_cred_id_t cred, gss_ctx_id_t* ctx, gss_name_t target,
                         gss_OID mech, OM_uint32 req_flags, OM_uint32 time_req,
                         gss_channel_bindings_t cb, gss_buffer_t in, gss_OID* actual,
                         gss_buffer_t out, OM_uint32* flags, OM_uint32* time_rec) CQ_GSS_UNAVAILABLE

    OM_uint32 gss_release_buffer(OM_uint32* minor, gss_buffer_t buf) CQ_GSS_UNAVAILABLE

    OM_uint32 gss_release_cred(OM_uint32* minor, gss_cred_id_t* cred) CQ_GSS_UNAVAILABLE

    OM_uint32 gss_release_name(OM_uint32* minor, gss_name_t* name) CQ_GSS_UNAVAILABLE

    OM_uint32 gss_unwrap(OM_uint32* minor, gss_ctx_id_t ctx, gss_buffer_t in, gss_buffer_t out,
                         int* conf, gss_qop_t* qop) CQ_GSS_UNAVAILABLE

    OM_uint32 gss_wrap(OM_uint32* minor, gss_ctx_id_t ctx, int conf_req, gss_qop_t qop,
                       gss_buffer_t in, int* conf, gss_buffer_t out) CQ_GSS_UNAVAILABLE

} // extern "C"
