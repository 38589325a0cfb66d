// socket_address_test.cc: SocketAddress (both families) and the HOST:PORT
// and target parsing built on it (runtime/rpc/address.h).
#include "runtime/transport/socket_address.h"

#include <arpa/inet.h>

#include "gtest/gtest.h"
#include "runtime/rpc/address.h"

namespace rdmarpc {
namespace internal {
namespace {

TEST(SocketAddress, Ipv4RoundTrips) {
  std::optional<SocketAddress> a = SocketAddress::FromIp("10.1.2.3", 7000);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->family(), AF_INET);
  EXPECT_FALSE(a->is_ipv6());
  EXPECT_EQ(a->port(), 7000);
  EXPECT_EQ(a->length(), sizeof(sockaddr_in));
  EXPECT_EQ(a->ToString(), "10.1.2.3:7000");
  const auto* sin = reinterpret_cast<const sockaddr_in*>(a->get());
  EXPECT_EQ(sin->sin_port, htons(7000));
  EXPECT_EQ(sin->sin_addr.s_addr, inet_addr("10.1.2.3"));
  a->set_port(1);
  EXPECT_EQ(a->ToString(), "10.1.2.3:1");
}

TEST(SocketAddress, Ipv6RoundTripsInBrackets) {
  std::optional<SocketAddress> a = SocketAddress::FromIp("::1", 443);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->family(), AF_INET6);
  EXPECT_EQ(a->length(), sizeof(sockaddr_in6));
  EXPECT_EQ(a->IpString(), "::1");
  EXPECT_EQ(a->ToString(), "[::1]:443");
  EXPECT_EQ(SocketAddress::FromIp("2001:db8:0:0:0:0:0:1", 80)->ToString(), "[2001:db8::1]:80");
  // A scope by index; "lo" is index 1 on Linux.
  std::optional<SocketAddress> scoped = SocketAddress::FromIp("fe80::1%lo", 80);
  ASSERT_TRUE(scoped.has_value());
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6*>(scoped->get())->sin6_scope_id, 1u);
  EXPECT_EQ(scoped->ToString(), "[fe80::1%lo]:80");
  EXPECT_FALSE(SocketAddress::FromIp("fe80::1%", 80).has_value());
  EXPECT_FALSE(SocketAddress::FromIp("fe80::1%no-such-if0", 80).has_value());
}

TEST(SocketAddress, RejectsNonNumericAndOtherFamilies) {
  EXPECT_FALSE(SocketAddress::FromIp("localhost", 1).has_value());
  EXPECT_FALSE(SocketAddress::FromIp("1.2.3", 1).has_value());
  EXPECT_FALSE(SocketAddress::FromIp("", 1).has_value());
  EXPECT_FALSE(SocketAddress::FromSockaddr(nullptr).has_value());
  sockaddr unix_family{};
  unix_family.sa_family = AF_UNIX;
  EXPECT_FALSE(SocketAddress::FromSockaddr(&unix_family).has_value());
}

TEST(SocketAddress, EqualityLooksAtFamilyAddressAndPort) {
  EXPECT_EQ(*SocketAddress::FromIp("::1", 5), *SocketAddress::FromIp("0:0::1", 5));
  EXPECT_NE(*SocketAddress::FromIp("::1", 5), *SocketAddress::FromIp("::1", 6));
  EXPECT_NE(*SocketAddress::FromIp("127.0.0.1", 5), *SocketAddress::FromIp("::ffff:127.0.0.1", 5));
  std::optional<SocketAddress> copy =
      SocketAddress::FromSockaddr(SocketAddress::FromIp("192.0.2.1", 9)->get());
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(*copy, *SocketAddress::FromIp("192.0.2.1", 9));
}

TEST(ParseHostPort, AcceptsEachForm) {
  EXPECT_EQ(ParseHostPort("127.0.0.1:80", false)->name, "127.0.0.1:80");
  EXPECT_EQ(ParseHostPort(" [::1]:80 ", false)->name, "[::1]:80");
  EXPECT_EQ(ParseHostPort("[::]:0", true)->name, "[::]:0");
  // A name: its IPv4 address first.
  EXPECT_EQ(ParseHostPort("localhost:81", false)->name, "127.0.0.1:81");
  EXPECT_EQ(ParseHostPort("[::1]:80", false, AddressForm::kIpv6Only)->name, "[::1]:80");
  EXPECT_EQ(ParseHostPort("10.0.0.1:80", false, AddressForm::kIpv4Only)->name, "10.0.0.1:80");
}

TEST(ParseHostPort, RefusesEachMalformedFormNamingIt) {
  struct Case {
    const char* input;
    bool allow_zero;
    AddressForm form;
    const char* message;
  };
  for (const Case& c : {
           Case{"127.0.0.1", false, AddressForm::kAny, "address \"127.0.0.1\" is not HOST:PORT"},
           Case{":80", false, AddressForm::kAny, "address \":80\" is not HOST:PORT"},
           Case{"127.0.0.1:0", false, AddressForm::kAny,
                "port \"0\" in \"127.0.0.1:0\" is not 1..65535"},
           Case{"127.0.0.1:65536", true, AddressForm::kAny,
                "port \"65536\" in \"127.0.0.1:65536\" is not 0..65535"},
           Case{"127.0.0.1:x", true, AddressForm::kAny,
                "port \"x\" in \"127.0.0.1:x\" is not 0..65535"},
           Case{"::1:80", false, AddressForm::kAny,
                "address \"::1:80\": an IPv6 address takes brackets, as [::1]:PORT"},
           Case{"[::1]80", false, AddressForm::kAny, "address \"[::1]80\" is not [IPV6]:PORT"},
           Case{"[::1:80", false, AddressForm::kAny, "address \"[::1:80\" is not [IPV6]:PORT"},
           Case{"[10.0.0.1]:80", false, AddressForm::kAny,
                "address \"[10.0.0.1]:80\": brackets are for IPv6 addresses only"},
           Case{"[host]:80", false, AddressForm::kAny,
                "\"host\" in \"[host]:80\" is not an IPv6 address"},
           Case{"[::1]:80", false, AddressForm::kIpv4Only,
                "\"[::1]:80\" is not IPV4:PORT with a numeric address"},
           Case{"localhost:80", false, AddressForm::kIpv6Only,
                "\"localhost:80\" is not [IPV6]:PORT with a numeric address"},
           Case{"no-such-host.invalid:80", false, AddressForm::kAny,
                "host \"no-such-host.invalid\" in \"no-such-host.invalid:80\" does not resolve"},
       }) {
    SCOPED_TRACE(c.input);
    absl::StatusOr<ResolvedAddress> r = ParseHostPort(c.input, c.allow_zero, c.form);
    ASSERT_FALSE(r.ok()) << r->name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.message), absl::string_view::npos) << r.status();
  }
}

TEST(ParseTarget, ListsWithAndWithoutSchemes) {
  absl::StatusOr<std::vector<ResolvedAddress>> t = ParseTarget("127.0.0.1:1,[::1]:2");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].name, "127.0.0.1:1");
  EXPECT_EQ((*t)[1].name, "[::1]:2");
  t = ParseTarget("ipv4:10.0.0.1:5,10.0.0.2:6");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[1].name, "10.0.0.2:6");
  t = ParseTarget("ipv6:[::1]:5,[2001:db8::2]:6");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[1].name, "[2001:db8::2]:6");
  EXPECT_EQ(ParseTarget("ipv6:[::1]:5,10.0.0.1:6").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTarget("").status().message(), "target \"\" names no address");
  EXPECT_EQ(ParseTarget("etc://10.0.0.2:2379/svc").status().message(),
            "target \"etc://10.0.0.2:2379/svc\": no resolver for scheme \"etc\" (built in: dns, "
            "etcd, and ipv4:/ipv6: address lists; rdmarpc::RegisterResolverFactory adds others)");
  EXPECT_EQ(ParseTarget("ipv6: ").status().message(), "target \"ipv6: \" names no address");
  EXPECT_EQ(ParseTarget("127.0.0.1:1,").status().message(), "address \"\" is not HOST:PORT");
}

}  // namespace
}  // namespace internal
}  // namespace rdmarpc
