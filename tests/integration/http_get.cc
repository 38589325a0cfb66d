// http_get.cc: a minimal HTTP GET for the integration scripts (CI machines
// have no curl), on cpp-httplib's client.
//
//   http_get HOST:PORT PATH            prints the body of GET PATH
//   http_get --promql HOST:PORT QUERY  GET /api/v1/query?query=QUERY (URL-encoded)
//                                      of a Prometheus server; prints the body
//
// Exit status: 0 for HTTP 200, 1 for any other status (printed on stderr
// with the body), 2 when no answer came within 10 s, 3 for bad arguments.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "httplib.h"

int main(int argc, char** argv) {
  bool promql = argc == 4 && std::string(argv[1]) == "--promql";
  if (!(argc == 3 || promql)) {
    std::fprintf(stderr, "usage: http_get HOST:PORT PATH | http_get --promql HOST:PORT QUERY\n");
    return 3;
  }
  const std::string target = argv[promql ? 2 : 1];
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "http_get: %s is not HOST:PORT\n", target.c_str());
    return 3;
  }
  httplib::Client client(target.substr(0, colon), std::atoi(target.c_str() + colon + 1));
  client.set_connection_timeout(10);
  client.set_read_timeout(10);
  httplib::Result res = promql ? client.Get("/api/v1/query", httplib::Params{{"query", argv[3]}},
                                          httplib::Headers{})
                               : client.Get(argv[2]);
  if (!res) {
    std::fprintf(stderr, "http_get: no answer from %s: %s\n", target.c_str(),
                 httplib::to_string(res.error()).c_str());
    return 2;
  }
  if (res->status != 200) {
    std::fprintf(stderr, "http_get: HTTP %d\n%s", res->status, res->body.c_str());
    return 1;
  }
  std::fwrite(res->body.data(), 1, res->body.size(), stdout);
  return 0;
}
