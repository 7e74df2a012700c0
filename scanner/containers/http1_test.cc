#include "scanner/containers/http1.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::scanner::containers::http1 {
namespace {

TEST(Http1Test, ParsesARequestHead) {
  const std::string text =
      "POST /v1.41/containers/create?name=web HTTP/1.1\r\nHost: docker\r\n"
      "content-type:  application/json \r\nContent-Length: 12\r\n\r\n";
  ASSERT_OK_AND_ASSIGN(size_t len, HeadLength(text + "{\"Image\":1}"));
  EXPECT_EQ(len, text.size());
  ASSERT_OK_AND_ASSIGN(Head head, ParseRequestHead(text));
  EXPECT_EQ(head.method, "POST");
  EXPECT_EQ(head.target, "/v1.41/containers/create?name=web");
  ASSERT_NE(head.Find("Content-Type"), nullptr);
  EXPECT_EQ(*head.Find("CONTENT-TYPE"), "application/json");
  ASSERT_OK_AND_ASSIGN(Framing f, RequestFraming(head));
  EXPECT_EQ(f.kind, BodyKind::kLength);
  EXPECT_EQ(f.length, 12u);
  EXPECT_EQ(ApiPath(head.target), "/containers/create");
  ASSERT_OK_AND_ASSIGN(std::string name, QueryParam(head.target, "name"));
  EXPECT_EQ(name, "web");
  // Re-serialized, it parses to the same.
  ASSERT_OK_AND_ASSIGN(Head again, ParseRequestHead(SerializeRequestHead(head)));
  EXPECT_EQ(again.headers.size(), head.headers.size());
}

TEST(Http1Test, HeadLengthWaitsAndBounds) {
  ASSERT_OK_AND_ASSIGN(size_t len, HeadLength("GET / HTTP/1.1\r\nHost: x\r\n"));
  EXPECT_EQ(len, 0u);
  std::string huge = "GET / HTTP/1.1\r\nX: " + std::string(kMaxHeadBytes, 'a');
  EXPECT_EQ(HeadLength(huge).status().code(), absl::StatusCode::kResourceExhausted);
  std::string late = huge + "\r\n\r\n";
  EXPECT_EQ(HeadLength(late).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Http1Test, ParsesResponseHeadsAndTheirFraming) {
  ASSERT_OK_AND_ASSIGN(Head r,
                       ParseResponseHead("HTTP/1.1 201 Created\r\nContent-Length: 88\r\n\r\n"));
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(r.reason, "Created");
  ASSERT_OK_AND_ASSIGN(Framing f, ResponseFraming(r, "POST"));
  EXPECT_EQ(f.kind, BodyKind::kLength);
  ASSERT_OK_AND_ASSIGN(f, ResponseFraming(r, "HEAD"));
  EXPECT_EQ(f.kind, BodyKind::kNone);

  ASSERT_OK_AND_ASSIGN(Head c,
                       ParseResponseHead("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"));
  ASSERT_OK_AND_ASSIGN(f, ResponseFraming(c, "GET"));
  EXPECT_EQ(f.kind, BodyKind::kChunked);

  ASSERT_OK_AND_ASSIGN(Head close, ParseResponseHead("HTTP/1.0 200 OK\r\n\r\n"));
  EXPECT_EQ(close.version_minor, 0);
  ASSERT_OK_AND_ASSIGN(f, ResponseFraming(close, "GET"));
  EXPECT_EQ(f.kind, BodyKind::kUntilClose);

  for (const char* text :
       {"HTTP/1.1 204 No Content\r\n\r\n", "HTTP/1.1 304 Not Modified\r\n\r\n",
        "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"}) {
    ASSERT_OK_AND_ASSIGN(Head h, ParseResponseHead(text));
    ASSERT_OK_AND_ASSIGN(f, ResponseFraming(h, "GET"));
    EXPECT_EQ(f.kind, BodyKind::kNone) << text;
  }
  ASSERT_OK_AND_ASSIGN(Head bare, ParseResponseHead("HTTP/1.1 200\r\n\r\n"));
  EXPECT_EQ(bare.reason, "");
}

TEST(Http1Test, RecognisesUpgradesAndDockersHijacks) {
  ASSERT_OK_AND_ASSIGN(Head attach,
                       ParseRequestHead("POST /v1.41/containers/abc/attach?stream=1 HTTP/1.1\r\n"
                                        "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"));
  EXPECT_TRUE(IsUpgradeRequest(attach));
  EXPECT_TRUE(IsHijackEndpoint(attach));
  ASSERT_OK_AND_ASSIGN(Head exec, ParseRequestHead("POST /exec/e1/start HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(IsUpgradeRequest(exec));
  EXPECT_TRUE(IsHijackEndpoint(exec));
  ASSERT_OK_AND_ASSIGN(
      Head libpod, ParseRequestHead("POST /v4.0.0/libpod/containers/x/attach HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(IsHijackEndpoint(libpod));
  ASSERT_OK_AND_ASSIGN(Head get, ParseRequestHead("GET /containers/abc/attach HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(IsHijackEndpoint(get));
  ASSERT_OK_AND_ASSIGN(Head logs, ParseRequestHead("POST /containers/abc/logs HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(IsHijackEndpoint(logs));
}

TEST(Http1Test, ApiPathStripsVersionAndLibpodAndDecodes) {
  bool libpod = false;
  EXPECT_EQ(ApiPath("/v1.41/containers/create?name=x", &libpod), "/containers/create");
  EXPECT_FALSE(libpod);
  EXPECT_EQ(ApiPath("/v4.2.0/libpod/volumes/create", &libpod), "/volumes/create");
  EXPECT_TRUE(libpod);
  EXPECT_EQ(ApiPath("/containers/%63reate"), "/containers/create");
  EXPECT_EQ(ApiPath("/version"), "/version");
  EXPECT_EQ(ApiPath("/vx/containers/create"), "/vx/containers/create");
}

TEST(Http1Test, RequestFramingRefusesSmuggling) {
  struct Case {
    const char* head;
    absl::StatusCode code;
    BodyKind kind;
  };
  const Case cases[] = {
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", absl::StatusCode::kOk,
       BodyKind::kChunked},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n",
       absl::StatusCode::kInvalidArgument, BodyKind::kNone},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
       absl::StatusCode::kInvalidArgument, BodyKind::kNone},
      {"POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
       absl::StatusCode::kInvalidArgument, BodyKind::kNone},
      {"POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n", absl::StatusCode::kOk,
       BodyKind::kLength},
      {"POST / HTTP/1.1\r\nContent-Length: +4\r\n\r\n", absl::StatusCode::kInvalidArgument,
       BodyKind::kNone},
      {"POST / HTTP/1.1\r\nContent-Length: 4, 4\r\n\r\n", absl::StatusCode::kInvalidArgument,
       BodyKind::kNone},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
       absl::StatusCode::kInvalidArgument, BodyKind::kNone},
      {"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", absl::StatusCode::kOk, BodyKind::kNone},
      {"GET / HTTP/1.1\r\n\r\n", absl::StatusCode::kOk, BodyKind::kNone},
  };
  for (const Case& c : cases) {
    ASSERT_OK_AND_ASSIGN(Head h, ParseRequestHead(c.head));
    absl::StatusOr<Framing> f = RequestFraming(h);
    EXPECT_EQ(f.status().code(), c.code) << c.head;
    if (f.ok()) EXPECT_EQ(f->kind, c.kind) << c.head;
  }
}

// Hostile heads, as a fuzzer would find them: each is refused, none crashes.
TEST(Http1Test, RefusesMalformedHeads) {
  const char* requests[] = {
      "GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n",       // bare LF
      "GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",       // bare CR
      "GET / HTTP/1.1\r\nHost : a\r\n\r\n",            // space before colon
      "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",  // obs-fold
      "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
      "GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n",
      "GET / HTTP/2.0\r\n\r\n",
      "GET /  HTTP/1.1\r\n\r\n",
      "GET * HTTP/1.1\r\n\r\n",
      "G(T / HTTP/1.1\r\n\r\n",
      "GET /\x7f HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\n",
      "\r\n\r\n",
      "",
  };
  for (const char* r : requests) {
    EXPECT_FALSE(ParseRequestHead(r).ok()) << absl::CEscape(r);
  }
  const char* responses[] = {
      "HTTP/1.1 20 OK\r\n\r\n",      "HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 099 x\r\n\r\n",
      "HTTP/1.1 abc OK\r\n\r\n",     "HTTP/1.1  200 OK\r\n\r\n", "HTTP/1.1 200OK\r\n\r\n",
      "HTTP/1.1 200 O\x01K\r\n\r\n", "HTTX/1.1 200 OK\r\n\r\n",  "HTTP/1.1 200 OK\r\n\r",
  };
  for (const char* r : responses) {
    EXPECT_FALSE(ParseResponseHead(r).ok()) << absl::CEscape(r);
  }
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 300; ++i) absl::StrAppend(&many, "X", i, ": y\r\n");
  many += "\r\n";
  EXPECT_EQ(ParseRequestHead(many).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Http1Test, ChunkedScannerFindsTheEndFedByteByByte) {
  const std::string body =
      "4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-T: 1\r\n\r\n";
  const std::string next = "GET / HTTP/1.1\r\n";
  for (size_t step : {size_t{1}, size_t{3}, body.size() + next.size()}) {
    std::string data;
    ChunkedScanner scanner(&data, 1024);
    std::string in = body + next;
    size_t consumed = 0;
    while (!scanner.done() && consumed < in.size()) {
      ASSERT_OK_AND_ASSIGN(size_t n, scanner.Feed(absl::string_view(in).substr(consumed, step)));
      consumed += n;
    }
    EXPECT_TRUE(scanner.done());
    EXPECT_EQ(consumed, body.size()) << step;
    EXPECT_EQ(data, "Wikipedia in\r\n\r\nchunks.");
  }
}

TEST(Http1Test, ChunkedScannerRefusesMalformedChunks) {
  const char* bad[] = {
      "x\r\n",   "4\nWiki\r\n",  "4\r\nWikiX\r\n", "-1\r\n",  "\r\n", "1000000000000000\r\n",
      "4 x\r\n", "0\r\nX\n\r\n", "4\r\nWiki\r\r",  "0x4\r\n",
  };
  for (const char* b : bad) {
    ChunkedScanner scanner;
    absl::StatusOr<size_t> n = scanner.Feed(b);
    EXPECT_FALSE(n.ok() && scanner.done()) << absl::CEscape(b);
    EXPECT_FALSE(n.ok()) << absl::CEscape(b);
  }
  std::string data;
  ChunkedScanner small(&data, 3);
  EXPECT_EQ(small.Feed("4\r\nWiki\r\n0\r\n\r\n").status().code(),
            absl::StatusCode::kResourceExhausted);
  ChunkedScanner long_line;
  EXPECT_EQ(long_line.Feed(std::string(5000, '0')).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(Http1Test, QueryParamDecodes) {
  ASSERT_OK_AND_ASSIGN(std::string v,
                       QueryParam("/volumes/create?a=1&name=my+vol%2F2&name=other", "name"));
  EXPECT_EQ(v, "my vol/2");
  ASSERT_OK_AND_ASSIGN(v, QueryParam("/x?y", "name"));
  EXPECT_EQ(v, "");
  EXPECT_FALSE(QueryParam("/x?name=%4", "name").ok());
  EXPECT_FALSE(QueryParam("/x?name=%zz", "name").ok());
  EXPECT_EQ(PercentEncode("a b/c{\"}"), "a%20b%2Fc%7B%22%7D");
}

}  // namespace
}  // namespace runreaper::scanner::containers::http1
