// RunStore tests, part of //store:run_store_test: pages that end at a byte
// budget (ListRunsQuery::max_bytes, ListEventsPage) and what a non-root
// uid's runs hold (Register's `admit`, schema 12's label_bytes).
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "store/run_store_test_fixture.h"

namespace runreaper::store {
namespace {

// A run with the most labels a registration may carry: 64 keys of 63 bytes
// and values of 256 (server/register/request_validation.h), about 20 KB.
RunProto MaximalRun(const std::string& id, uint32_t registered_uid = 0) {
  RunProto r = MakeRun(id);
  r.clear_labels();
  for (int k = 0; k < 64; ++k) {
    std::string key = absl::StrCat("k", k, "_");
    key.resize(63, 'k');
    (*r.mutable_labels())[key] = std::string(256, static_cast<char>('a' + k % 26));
  }
  r.set_registered_uid(registered_uid);
  return r;
}

// What the answer of one page would carry: the runs as a ListRunsResponse.
size_t AnswerBytes(const ListRunsPage& page) {
  v1::ListRunsResponse answer;
  for (const RunProto& r : page.runs) *answer.add_runs() = r;
  answer.set_next_page_token(page.next_page_token);
  return answer.ByteSizeLong();
}

// Sixty runs of about 20 KB: a page of all of them (1.2 MB) is past the
// budget; with max_bytes each page stays within it, ends early with a
// token, and the pages together hold every run once, in order.
TEST_F(RunStoreTest, ListPagesEndAtTheByteBudget) {
  auto store = OpenOrDie();
  constexpr int kRuns = 60;
  for (int i = 0; i < kRuns; ++i) {
    ASSERT_OK(store->Register(MaximalRun(absl::StrFormat("big%03d", i))));
  }
  constexpr size_t kBudget = 200 * 1000;
  ListRunsQuery whole;
  whole.page_size = 1000;
  ASSERT_OK_AND_ASSIGN(ListRunsPage all, store->List(whole));
  ASSERT_EQ(all.runs.size(), static_cast<size_t>(kRuns));
  EXPECT_GT(AnswerBytes(all), 5 * kBudget);  // what paging by count alone answers

  ListRunsQuery q = whole;
  q.max_bytes = kBudget;
  std::vector<std::string> seen;
  int pages = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(q));
    ++pages;
    ASSERT_FALSE(page.runs.empty());
    size_t entries = 0;
    for (const RunProto& r : page.runs) entries += AnswerEntryBytes(r);
    EXPECT_LE(entries, kBudget) << "page " << pages;
    EXPECT_LE(AnswerBytes(page), kBudget + 100) << "page " << pages;  // + the token
    for (const RunProto& r : page.runs) {
      seen.push_back(r.run_id());
      EXPECT_EQ(r.labels_size(), 64) << r.run_id();  // runs are whole
    }
    if (page.next_page_token.empty()) break;
    // Ended early: the next run would not have fitted.
    EXPECT_LT(page.runs.size(), 1000u);
    q.page_token = page.next_page_token;
    ASSERT_LT(pages, 100);
  }
  EXPECT_GE(pages, 6);
  std::vector<std::string> expected;
  for (const RunProto& r : all.runs) expected.push_back(r.run_id());
  EXPECT_EQ(seen, expected);
}

// A run larger than the whole budget still makes a page of its own: paging
// always moves on.
TEST_F(RunStoreTest, ListPageHoldsOneRunLargerThanTheBudget) {
  auto store = OpenOrDie();
  for (int i = 0; i < 3; ++i) ASSERT_OK(store->Register(MaximalRun(absl::StrCat("r", i))));
  ListRunsQuery q;
  q.max_bytes = 1000;
  std::vector<std::string> seen;
  for (int pages = 0; pages < 10; ++pages) {
    ASSERT_OK_AND_ASSIGN(ListRunsPage page, store->List(q));
    ASSERT_EQ(page.runs.size(), 1u);
    seen.push_back(page.runs[0].run_id());
    if (page.next_page_token.empty()) break;
    q.page_token = page.next_page_token;
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"r0", "r1", "r2"}));
}

// The audit log pages the same way: a page of events with large details
// ends at the budget, says there is more, and the pages hold every event
// once; the last page says there is no more.
TEST_F(RunStoreTest, ListEventsPageEndsAtTheByteBudget) {
  auto store = OpenOrDie();
  const std::string reason(1000, 'r');
  for (int i = 0; i < 40; ++i) {
    const std::string id = absl::StrCat("c", i);
    ASSERT_OK(store->Register(MakeRun(id)));
    ASSERT_OK(store->Cancel(id, reason));
  }
  const std::vector<v1::Event> every = Events(*store);
  ASSERT_EQ(every.size(), 80u);
  constexpr size_t kBudget = 10 * 1000;
  int64_t after = 0;
  std::vector<int64_t> seen;
  for (int pages = 0;; ++pages) {
    ASSERT_LT(pages, 100);
    ASSERT_OK_AND_ASSIGN(EventsPage page, store->ListEventsPage(after, "", 1000, kBudget));
    ASSERT_FALSE(page.events.empty());
    size_t entries = 0;
    for (const v1::Event& e : page.events) {
      entries += AnswerEntryBytes(e);
      seen.push_back(e.event_id());
    }
    EXPECT_LE(entries, kBudget);
    if (!page.more) break;
    after = page.events.back().event_id();
  }
  std::vector<int64_t> expected;
  for (const v1::Event& e : every) expected.push_back(e.event_id());
  EXPECT_EQ(seen, expected);
  // Without a byte bound, one page; `more` only when it ends at the limit.
  ASSERT_OK_AND_ASSIGN(EventsPage whole, store->ListEventsPage(0, "", 1000, 0));
  EXPECT_EQ(whole.events.size(), 80u);
  EXPECT_FALSE(whole.more);
  ASSERT_OK_AND_ASSIGN(EventsPage ten, store->ListEventsPage(0, "", 10, 0));
  EXPECT_EQ(ten.events.size(), 10u);
  EXPECT_TRUE(ten.more);
}

// `admit` sees what a non-root uid's stored runs hold before each new run:
// its runs of every state and their label bytes, not another uid's, not
// root's. It is not asked for root, nor for a registration that returns an
// existing run; its refusal stores nothing.
TEST_F(RunStoreTest, AdmitSeesWhatAUidsRunsHold) {
  auto store = OpenOrDie();
  std::vector<UidUsage> asked;
  auto admit = [&](const UidUsage& u) {
    asked.push_back(u);
    return absl::OkStatus();
  };
  const int64_t maximal = LabelBytes(MaximalRun("x"));
  EXPECT_EQ(maximal, 64 * (63 + 256));
  ASSERT_OK(store->Register(MaximalRun("a1", 1001), admit));
  ASSERT_OK(store->Register(MaximalRun("a2", 1001), admit));
  ASSERT_OK(store->Finish("a1", 0));  // ended runs count until deleted
  ASSERT_OK(store->Register(MaximalRun("b1", 1002), admit));
  ASSERT_OK(store->Register(MaximalRun("root1", 0), admit));
  ASSERT_OK(store->Register(MaximalRun("a2", 1001), admit));  // the same run again
  RunProto small = MakeRun("a3");                             // labels queue=gpu, team=infra
  small.set_registered_uid(1001);
  ASSERT_OK(store->Register(small, admit));
  ASSERT_EQ(asked.size(), 4u);
  EXPECT_EQ(asked[0].runs, 0);
  EXPECT_EQ(asked[0].label_bytes, 0);
  EXPECT_EQ(asked[1].runs, 1);
  EXPECT_EQ(asked[1].label_bytes, maximal);
  EXPECT_EQ(asked[2].runs, 0);  // uid 1002's own
  EXPECT_EQ(asked[3].runs, 2);
  EXPECT_EQ(asked[3].label_bytes, 2 * maximal);

  const int64_t events = static_cast<int64_t>(Events(*store).size());
  absl::Status refused = store
                             ->Register(MaximalRun("a4", 1001),
                                        [&](const UidUsage& u) {
                                          EXPECT_EQ(u.runs, 3);
                                          EXPECT_EQ(u.label_bytes, 2 * maximal + LabelBytes(small));
                                          return absl::ResourceExhaustedError("over");
                                        })
                             .status();
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_TRUE(absl::IsNotFound(store->Get("a4").status()));
  EXPECT_EQ(static_cast<int64_t>(Events(*store).size()), events);
}

// The read admit gets is the covering index of schema 12, not a scan.
TEST_F(RunStoreTest, UidUsageIsReadFromTheMemberIndex) {
  auto store = OpenOrDie();
  ASSERT_OK(store->Register(MaximalRun("a1", 1001)));
  store.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "EXPLAIN QUERY PLAN SELECT COUNT(*), COALESCE(SUM(label_bytes), 0) "
                               "FROM runs WHERE registered_uid = 1001 AND registered_uid != 0",
                               -1, &st, nullptr),
            SQLITE_OK);
  std::string plan;
  while (sqlite3_step(st) == SQLITE_ROW) {
    absl::StrAppend(&plan, reinterpret_cast<const char*>(sqlite3_column_text(st, 3)), "\n");
  }
  sqlite3_finalize(st);
  sqlite3_close_v2(db);
  EXPECT_TRUE(Contains(plan, "USING COVERING INDEX runs_by_member")) << plan;
}

// A schema-11 file: opening it fills in label_bytes of the runs it holds
// (the member's run under its canonical id from migration 13 on), so a
// uid's bound counts the labels of runs stored before it.
TEST_F(RunStoreTest, MigratesASchemaElevenFile) {
  {
    auto store = OpenOrDie();
    ASSERT_OK(store->Register(MaximalRun("a1", 1001)));
    ASSERT_OK(store->Register(MakeRun("root1")));
  }
  RawExec(path_, std::string(kUndoSchemaTwelve) + "PRAGMA user_version = 11;");
  ASSERT_EQ(RawQueryInt(path_,
                        "SELECT count(*) FROM pragma_table_info('runs') "
                        "WHERE name = 'label_bytes'"),
            0);
  auto store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawQueryInt(path_, "PRAGMA user_version"), RunStore::kSchemaVersion);
  EXPECT_EQ(RawQueryInt(path_, "SELECT label_bytes FROM runs WHERE run_id = 'a1@u1001'"),
            64 * (63 + 256));
  EXPECT_EQ(RawQueryInt(path_, "SELECT label_bytes FROM runs WHERE run_id = 'root1'"),
            LabelBytes(MakeRun("root1")));
  std::vector<UidUsage> asked;
  ASSERT_OK(store->Register(MaximalRun("a2", 1001), [&](const UidUsage& u) {
    asked.push_back(u);
    return absl::OkStatus();
  }));
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].runs, 1);
  EXPECT_EQ(asked[0].label_bytes, 64 * (63 + 256));
}

}  // namespace
}  // namespace runreaper::store
