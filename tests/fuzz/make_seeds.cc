// make_seeds.cc: writes the seed corpora of the fuzz targets
// (tests/fuzz/corpus/<target>/) with the real encoders, so the seeds are
// valid messages the fuzzer mutates from.
//
//   make_seeds DIR     writes DIR/header/..., DIR/handshake/..., ...
//
// The corpora in the tree were made with it; run it again after a wire
// format change and commit what it writes.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "runtime/rpc/metadata.h"
#include "runtime/rpc/status_payloads.h"
#include "runtime/softrdma/shm_record.h"
#include "runtime/softrdma/wire.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/header.h"
#include "runtime/transport/transport.h"

namespace {

using namespace rdmarpc::internal;  // NOLINT: a tool over the internal codecs

std::string g_dir;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = g_dir + "/" + target;
  mkdir(g_dir.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

// imm_data (4 bytes, host order) then the message, as header_fuzzer reads.
std::string HeaderSeed(const Imm& imm, WireHeader h, const std::string& aux,
                       const std::string& meta, const std::string& payload,
                       RemoteBuffer remote = {}, RemoteBuffer reply = {},
                       const AttachmentDescriptor& attachment = {},
                       const std::string& inline_attachment = "") {
  h.aux_len = static_cast<uint16_t>(aux.size());
  // With kFlagMetaInPayload the caller set meta_len and put the metadata
  // at the start of the payload.
  if (!(h.flags & kFlagMetaInPayload)) h.meta_len = static_cast<uint32_t>(meta.size());
  if (!(h.flags & kFlagPayloadRemote)) h.payload_len = static_cast<uint32_t>(payload.size());
  std::string out(4, '\0');
  const uint32_t bits = EncodeImm(imm);
  std::memcpy(out.data(), &bits, 4);
  std::string prefix(EncodedPrefixBytes(h), '\0');
  EncodePrefix(h, aux, remote, reply, prefix.data(), meta, attachment);
  out += prefix;
  if (!(h.flags & kFlagPayloadRemote)) out += payload;
  out += inline_attachment;
  return out;
}

void HeaderSeeds() {
  WireHeader req;
  req.kind = MsgKind::kRequest;
  req.timeout_us = 5000;
  Write("header", "request", HeaderSeed({MsgKind::kRequest, 1, 7}, req, "/pkg.Svc/Method",
                                        EncodeMetadata({{"k", "v"}}), "\x0a\x03hey"));
  WireHeader stream = req;
  stream.flags = kFlagStream | kFlagReplyBuffer;
  Write("header", "stream_open",
        HeaderSeed({MsgKind::kRequest, 2, 8}, stream, "/pkg.Svc/Chat", "", "",
                   {}, {0x7f0000001000, 0x1234, 65536}));
  WireHeader resp;
  resp.kind = MsgKind::kResponse;
  resp.status_code = 5;
  Write("header", "response_error",
        HeaderSeed({MsgKind::kResponse, 1, 7}, resp, "not found", "", ""));
  WireHeader remote = resp;
  remote.status_code = 0;
  remote.flags = kFlagPayloadRemote;
  remote.payload_len = 1 << 20;
  remote.ref = 3;
  Write("header", "response_remote",
        HeaderSeed({MsgKind::kResponse, 1, 9}, remote, "", "", "", {0x7f0000100000, 0x99, 1 << 20}));
  WireHeader msg;
  msg.kind = MsgKind::kStreamMessage;
  msg.flags = kFlagMetaInPayload | kFlagEndStream;
  std::string meta = EncodeMetadata({{"big", std::string(40, 'b')}});
  msg.meta_len = static_cast<uint32_t>(meta.size());
  std::string bytes = HeaderSeed({MsgKind::kStreamMessage, 3, 1}, msg, "", "", meta + "\x0a\x01x");
  Write("header", "stream_meta_in_payload", bytes);
  WireHeader credit;
  credit.kind = MsgKind::kCredit;
  credit.credits = 32;
  Write("header", "credit", HeaderSeed({MsgKind::kCredit, 0, 0}, credit, "", "", ""));
  WireHeader window;
  window.kind = MsgKind::kWindow;
  window.ref = 16;
  Write("header", "window", HeaderSeed({MsgKind::kWindow, 4, 2}, window, "", "", ""));
  WireHeader goaway;
  goaway.kind = MsgKind::kGoAway;
  Write("header", "goaway", HeaderSeed({MsgKind::kGoAway, 0, 0}, goaway, "", "", ""));
  WireHeader refused;
  refused.kind = MsgKind::kResponse;
  refused.flags = kFlagRefused;
  refused.status_code = 14;  // UNAVAILABLE
  Write("header", "response_refused",
        HeaderSeed({MsgKind::kResponse, 5, 3}, refused, "server shutting down: not started", "",
                   ""));
  WireHeader with_inline = req;
  with_inline.flags = kFlagAttachment;
  AttachmentDescriptor inline_ad;
  inline_ad.length = 6;
  Write("header", "request_attachment_inline",
        HeaderSeed({MsgKind::kRequest, 6, 4}, with_inline, "/pkg.Svc/Put", "", "\x0a\x01k", {}, {},
                   inline_ad, "value!"));
  WireHeader with_remote = resp;
  with_remote.status_code = 0;
  with_remote.flags = kFlagAttachment | kFlagPayloadRemote;
  with_remote.payload_len = 1 << 16;
  with_remote.ref = 11;
  AttachmentDescriptor remote_ad;
  remote_ad.length = 1 << 20;
  remote_ad.remote = true;
  remote_ad.buffer = {0x7f0000200000, 0x77, 1 << 20};
  Write("header", "response_attachment_remote",
        HeaderSeed({MsgKind::kResponse, 6, 4}, with_remote, "", "", "",
                   {0x7f0000100000, 0x99, 1 << 16}, {}, remote_ad));
}

void HandshakeSeeds() {
  const auto offer = Handshake::Offer(kProtocolVersion, 64, 8192);
  Write("handshake", "offer", std::string(offer.data(), offer.size()));
  const auto with_token = Handshake::Offer(kProtocolVersion, 64, 8192, "0123456789abcdef");
  Write("handshake", "offer_token", std::string(with_token.data(), with_token.size()));
  // As the IB CM delivers a request: padded with zeros to 56 bytes.
  std::string padded(offer.data(), offer.size());
  padded.resize(kMaxConnectPrivateDataBytes, '\0');
  Write("handshake", "offer_padded", padded);
  const auto reject = Handshake::Reject(kProtocolVersion, kRejectShuttingDown);
  Write("handshake", "reject", std::string(reject.data(), reject.size()));
}

void MetadataSeeds() {
  Write("metadata", "empty", EncodeMetadata({}));
  Write("metadata", "two", EncodeMetadata({{"authorization", "Bearer x"}, {"trace-bin", "\x01\x02"}}));
  Write("metadata", "response", EncodeResponseMetadata({{"a", "1"}}, {{"b", "2"}, {"b", "3"}}));
  Write("metadata", "response_big", EncodeResponseMetadata({{"big", std::string(100, 'x')}}, {}));
}

void StatusPayloadSeeds() {
  absl::Status s = absl::AbortedError("failed");
  s.SetPayload("type.googleapis.com/google.rpc.RetryInfo", absl::Cord("\x0a\x02\x08\x01"));
  Write("status_payloads", "one", EncodeStatusPayloads(s));
  s.SetPayload("why", absl::Cord("because"));
  Write("status_payloads", "two", EncodeStatusPayloads(s));
}

// A frame header then CONNECT_REQ parameters, as softrdma_wire_fuzzer reads.
void SoftrdmaWireSeeds() {
  namespace sw = softrdma::internal;
  sw::FrameHeader h;
  h.type = sw::FrameType::kConnectReq;
  h.psn = 1;
  sw::ConnParams p;
  p.qp_num = 17;
  p.responder_resources = 16;
  p.initiator_depth = 16;
  p.retry_count = 7;
  const auto offer = Handshake::Offer(kProtocolVersion, 64, 8192);
  p.private_data_len = static_cast<uint8_t>(offer.size());
  std::memcpy(p.private_data, offer.data(), offer.size());
  std::vector<uint8_t> params = sw::EncodeConnParams(p);
  h.length = static_cast<uint32_t>(params.size());
  std::string bytes(sw::kHeaderSize, '\0');
  sw::EncodeHeader(h, reinterpret_cast<uint8_t*>(bytes.data()));
  Write("softrdma_wire", "connect_req", bytes + std::string(params.begin(), params.end()));
  p.shm.present = true;
  p.shm.accept = 1;
  std::memset(p.shm.boot_id, 'b', sizeof(p.shm.boot_id));
  p.shm.pid = 4242;
  p.shm.name_len = 12;
  std::memcpy(p.shm.name, "/softrdma-42", 12);
  params = sw::EncodeConnParams(p);
  Write("softrdma_wire", "accept_shm", bytes + std::string(params.begin(), params.end()));
  sw::FrameHeader w;
  w.type = sw::FrameType::kWrite;
  w.addr = 0x7f0000001000;
  w.rkey = 0x1234;
  w.length = 8;
  std::string write(sw::kHeaderSize, '\0');
  sw::EncodeHeader(w, reinterpret_cast<uint8_t*>(write.data()));
  Write("softrdma_wire", "write", write + "12345678");
}

// Ring records as ShmLink's producer writes them: a SEND frame with an
// inline payload, a kRemoteData WRITE with one SGE, then a pad.
std::string ShmRecordOf(const std::string& frame) {
  namespace sw = softrdma::internal;
  const uint32_t size = static_cast<uint32_t>((sw::kRecHeader + frame.size() + 7) & ~size_t{7});
  std::string rec(size, '\0');
  const uint32_t hdr[2] = {size, sw::kRecFrame};
  std::memcpy(rec.data(), hdr, sizeof(hdr));
  std::memcpy(rec.data() + sw::kRecHeader, frame.data(), frame.size());
  return rec;
}

void ShmRingSeeds() {
  namespace sw = softrdma::internal;
  sw::FrameHeader send;
  send.type = sw::FrameType::kSend;
  send.psn = 3;
  send.length = 5;
  std::string f1(sw::kHeaderSize, '\0');
  sw::EncodeHeader(send, reinterpret_cast<uint8_t*>(f1.data()));
  f1 += "hello";
  sw::FrameHeader write;
  write.type = sw::FrameType::kWrite;
  write.flags = sw::kRemoteData;
  write.rkey = 7;
  write.addr = 0x1000;
  write.length = sw::kSglEntryBytes;
  write.read_len = 65536;
  std::string f2(sw::kHeaderSize, '\0');
  sw::EncodeHeader(write, reinterpret_cast<uint8_t*>(f2.data()));
  const uint64_t addr = 0x7f0000000000;
  const uint32_t len = 65536;
  f2.append(reinterpret_cast<const char*>(&addr), 8);
  f2.append(reinterpret_cast<const char*>(&len), 4);
  std::string pad(16, '\0');
  const uint32_t pad_hdr[2] = {16, sw::kRecPad};
  std::memcpy(pad.data(), pad_hdr, sizeof(pad_hdr));
  Write("shm_ring", "send", ShmRecordOf(f1));
  Write("shm_ring", "send_write_pad", ShmRecordOf(f1) + ShmRecordOf(f2) + pad);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  g_dir = argv[1];
  HeaderSeeds();
  HandshakeSeeds();
  MetadataSeeds();
  StatusPayloadSeeds();
  SoftrdmaWireSeeds();
  ShmRingSeeds();
  return 0;
}
