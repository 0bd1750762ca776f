// NORM switched off for a statically linked libzmq (docs/adr/0032).
//
// libzmq.a names the NORM API for its norm:// transport, which links
// libnorm.a and Protolib's libprotokit.a into `cq`. Their static
// constructors run before main on every command: ProtoAddress objects parse
// addresses with sscanf and inet_pton, and normApi.cpp builds its globals,
// about a fifth of the page faults of `cq --version`. cq never opens a
// norm:// endpoint (a DEALER socket to tcp:// or ipc:// only), so these
// stand in for every NORM symbol libzmq.a names: the instance cannot be
// created, and the rest is never reached. Neither archive is linked.
#include <normApi.h>

extern "C" {

const NormInstanceHandle NORM_INSTANCE_INVALID = nullptr;
const NormSessionHandle NORM_SESSION_INVALID = nullptr;
const NormObjectHandle NORM_OBJECT_INVALID = nullptr;
const NormNodeId NORM_NODE_ANY = 0xffffffff;

NormInstanceHandle NormCreateInstance(bool) {
  return NORM_INSTANCE_INVALID;
}
NormSessionHandle NormCreateSession(NormInstanceHandle, const char*, UINT16, NormNodeId) {
  return NORM_SESSION_INVALID;
}
void NormDestroyInstance(NormInstanceHandle) {}
void NormDestroySession(NormSessionHandle) {}
NormDescriptor NormGetDescriptor(NormInstanceHandle) {
  return -1;
}
bool NormGetNextEvent(NormInstanceHandle, NormEvent*, bool) {
  return false;
}
NormSessionId NormGetRandomSessionId() {
  return 0;
}
bool NormIsUnicastAddress(const char*) {
  return false;
}
void NormNodeDelete(NormNodeHandle) {}
NormObjectType NormObjectGetType(NormObjectHandle) {
  return NORM_OBJECT_NONE;
}
const void* NormObjectGetUserData(NormObjectHandle) {
  return nullptr;
}
void NormObjectSetUserData(NormObjectHandle, const void*) {}
void NormSetCongestionControl(NormSessionHandle, bool, bool) {}
void NormSetDefaultSyncPolicy(NormSessionHandle, NormSyncPolicy) {}
void NormSetDefaultUnicastNack(NormSessionHandle, bool) {}
bool NormSetLoopback(NormSessionHandle, bool) {
  return false;
}
bool NormSetMulticastInterface(NormSessionHandle, const char*) {
  return false;
}
void NormSetRxPortReuse(NormSessionHandle, bool, const char*, const char*, UINT16) {}
bool NormSetTTL(NormSessionHandle, unsigned char) {
  return false;
}
bool NormStartReceiver(NormSessionHandle, UINT32) {
  return false;
}
bool NormStartSender(NormSessionHandle, NormSessionId, UINT32, UINT16, UINT16, UINT16, UINT8) {
  return false;
}
void NormStopInstance(NormInstanceHandle) {}
void NormStopReceiver(NormSessionHandle) {}
void NormStopSender(NormSessionHandle) {}
void NormStreamFlush(NormObjectHandle, bool, NormFlushMode) {}
NormObjectHandle NormStreamOpen(NormSessionHandle, UINT32, const char*, unsigned int) {
  return NORM_OBJECT_INVALID;
}
bool NormStreamRead(NormObjectHandle, char*, unsigned int*) {
  return false;
}
bool NormStreamSeekMsgStart(NormObjectHandle) {
  return false;
}
unsigned int NormStreamWrite(NormObjectHandle, const char*, unsigned int) {
  return 0;
}

} // extern "C"
