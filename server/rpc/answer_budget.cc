#include "server/rpc/answer_budget.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "store/run_store.h"

namespace runreaper::server {
namespace {

// Keeps the first entries of `list` that fit in `*left` bytes, takes their
// bytes from `*left` and returns how many were dropped. Once one entry does
// not fit, none after it is kept either: the answer holds a prefix of each
// list, as its *_left_off count says.
template <typename T>
int KeepFirst(google::protobuf::RepeatedPtrField<T>* list, size_t* left) {
  int keep = 0;
  for (; keep < list->size(); ++keep) {
    const size_t entry = store::AnswerEntryBytes(list->Get(keep));
    if (entry > *left) break;
    *left -= entry;
  }
  const int dropped = list->size() - keep;
  list->DeleteSubrange(keep, dropped);
  return dropped;
}

// The budget less a scalar's worth per field, for the fields outside the
// lists (a few varints, a short string).
size_t ListBudget(size_t budget, size_t other_bytes) {
  const size_t reserve = other_bytes + 64;
  return budget > reserve ? budget - reserve : 0;
}

}  // namespace

void FitListOrphans(v1::ListOrphansResponse* a, size_t budget) {
  if (a->ByteSizeLong() <= budget) return;
  size_t left = ListBudget(budget, 0);
  a->set_orphans_left_off(a->orphans_left_off() + KeepFirst(a->mutable_orphans(), &left));
  a->set_zombie_piles_left_off(a->zombie_piles_left_off() +
                               KeepFirst(a->mutable_zombie_piles(), &left));
}

void FitSweep(v1::SweepResponse* a, size_t budget) {
  if (a->proof().size() > kMaxProofBytes) {
    // Cut where a character starts, so valid UTF-8 stays valid.
    size_t end = kMaxProofBytes - 64;
    while (end > 0 && (static_cast<unsigned char>(a->proof()[end]) & 0xC0) == 0x80) --end;
    std::string cut = a->proof().substr(0, end);
    absl::StrAppend(&cut, " ... (", a->proof().size() - cut.size(), " more bytes)");
    a->set_proof(std::move(cut));
  }
  if (a->ByteSizeLong() <= budget) return;
  size_t left = ListBudget(budget, a->proof().size());
  a->set_survivors_left_off(a->survivors_left_off() + KeepFirst(a->mutable_survivors(), &left));
  a->set_targets_left_off(a->targets_left_off() + KeepFirst(a->mutable_targets(), &left));
  a->set_receipts_left_off(a->receipts_left_off() + KeepFirst(a->mutable_receipts(), &left));
  a->set_signals_left_off(a->signals_left_off() + KeepFirst(a->mutable_signals(), &left));
}

void FitReconcile(v1::ReconcileResponse* a, size_t budget) {
  if (a->ByteSizeLong() <= budget) return;
  size_t left = ListBudget(budget, 0);
  a->set_transitions_left_off(a->transitions_left_off() +
                              KeepFirst(a->mutable_transitions(), &left));
}

}  // namespace runreaper::server
