// WaitPicture: who waits where, as a watcher of a whole job last heard it from each rank, and the
// verdict once no wait can ever end. The judgement behind every watcher of the checked
// exchanges (comm/exchange_watcher.hpp): MpiWatchdog (comm/mpi_watchdog.hpp) and TcpWatchdog
// (comm/tcp_watchdog.hpp), whose world rank 0 hears the other processes' words over MPI or TCP,
// and InProcessWatchdog (comm/in_process_watchdog.hpp), whose ranks are threads of one process
// and write their words to one board.
//
// A rank's word says whether it runs, waits in exchange #n of a group, or has returned and waits
// for its groups' last exchanges, with how many exchanges it has posted on each of its groups.
// The verdict: when every rank waits or has returned, and each exchange waited in has a member
// whose posted count on that group is below the exchange's number, no exchange can ever complete.
// It holds although words may be stale when read: suppose a rank did leave the wait it was last
// heard in, and take the first rank to do so. Its exchange completed, so every member had posted
// it, and a member heard with a lower count must have posted more after its word, so left the
// wait it was heard in earlier still: a contradiction (counts only grow, so no word shows a count
// too high). A rank not yet heard from, or heard running, holds the verdict back.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpx/comm/call_record.hpp"
#include "tpx/comm/exchange_watcher.hpp"
#include "tpx/comm/group_name.hpp"

namespace tpx::detail {

// Which groups of the world exist: group ids 1..ids-1 (the launchers use the mesh's axis sets as
// bit masks), a label per id ("mesh axis X") and a color per id and world rank, equal exactly for
// the ranks of one group of that id (spmd.hpp's mesh_group_layout).
struct GroupLayout {
  unsigned ids = 1;
  std::vector<std::string> labels;          // [id]
  std::function<int(unsigned, int)> color;  // (id, world rank)
};

// What a rank last told the watcher (see the top of the file).
struct RankWord {
  enum State : std::uint64_t { running = 0, waits = 1, returned = 2 };
  std::uint64_t state = running;
  unsigned group = 0;
  std::uint64_t sequence = 0;
  CallRecord call;
  std::vector<std::uint64_t> posted;  // [group id]
};

// A word on the wire, as wire_words(group ids) 64-bit integers: state, group, sequence, the call
// record, the posted count of each group id.
inline std::size_t wire_words(unsigned ids) { return 3 + call_record_words + ids; }
inline std::vector<std::uint64_t> wire_of(const RankWord& w) {
  std::vector<std::uint64_t> wire{w.state, w.group, w.sequence};
  const auto call = std::bit_cast<std::array<std::uint64_t, call_record_words>>(w.call);
  wire.insert(wire.end(), call.begin(), call.end());
  wire.insert(wire.end(), w.posted.begin(), w.posted.end());
  return wire;
}
inline RankWord word_from_wire(std::span<const std::uint64_t> wire) {
  RankWord w;
  w.state = wire[0];
  w.group = static_cast<unsigned>(wire[1]);
  w.sequence = wire[2];
  std::array<std::uint64_t, call_record_words> call;
  std::copy_n(wire.begin() + 3, call_record_words, call.begin());
  w.call = std::bit_cast<CallRecord>(call);
  w.posted.assign(wire.begin() + 3 + call_record_words, wire.end());
  return w;
}

// The word of a rank that has posted `posted` exchanges on each group id and waits as `where`
// says (group 0: it has returned), or (nullopt) runs.
inline RankWord word_of(std::span<const std::uint64_t> posted,
                        const std::optional<exchange_wait>& where) {
  RankWord w;
  w.posted.assign(posted.begin(), posted.end());
  if (!where) return w;
  w.state = where->group == 0 ? RankWord::returned : RankWord::waits;
  w.group = where->group;
  w.sequence = where->sequence;
  w.call = where->call;
  return w;
}

class WaitPicture {
 public:
  // `hosts`: every world rank's host, named in messages, or none.
  WaitPicture(int ranks, GroupLayout layout, std::vector<std::string> hosts)
      : layout_(std::move(layout)),
        hosts_(std::move(hosts)),
        heard_(static_cast<std::size_t>(ranks)) {}

  const GroupLayout& layout() const noexcept { return layout_; }
  std::span<const std::string> hosts() const noexcept { return hosts_; }

  void hear(int rank, RankWord word) { heard_[static_cast<std::size_t>(rank)] = std::move(word); }

  // The verdict (see the top of the file): the message of the comm_error every rank should fail
  // with, as `finder` ("world rank 0 (host node0)") found after waiting `waited_ms`; or nothing
  // while some rank may still go on.
  std::optional<std::string> deadlock(std::string_view finder, long long waited_ms) const {
    if (std::any_of(heard_.begin(), heard_.end(),
                    [](const auto& w) { return !w || w->state == RankWord::running; }))
      return std::nullopt;
    const std::vector<Stuck> stuck = exchanges_waited_in();
    if (stuck.empty() ||
        std::any_of(stuck.begin(), stuck.end(), [](const Stuck& s) { return s.missing.empty(); }))
      return std::nullopt;
    std::string what = "tpx: the collectives are deadlocked, every rank waiting for another, as " +
                       std::string(finder) + " found after waiting " + std::to_string(waited_ms) +
                       " ms: ";
    for (std::size_t i = 0; i < stuck.size() && i < 16; ++i)
      what += (i ? "; " : "") + line(stuck[i], true);
    if (stuck.size() > 16)
      what += "; and " + std::to_string(stuck.size() - 16) + " more collectives";
    const std::vector<int> returned = ranks_in(RankWord::returned);
    if (!returned.empty()) what += "; " + ranks_on_hosts(returned, hosts_) + " returned";
    return what +
           ". Is a collective inside rank-dependent control flow, e.g. "
           "`if (rank.world_rank() == 0)`?";
  }

  // " <heard_by> last heard: world rank 1 not waiting in any collective; world ranks {0,2,3} wait
  // in collective #2 on ...": what the watcher knows, for a timeout's message.
  std::string last_heard(std::string_view heard_by) const {
    std::vector<int> idle;
    std::vector<std::string> lines;
    for (const Stuck& s : exchanges_waited_in()) lines.push_back(line(s, false));
    for (std::size_t r = 0; r < heard_.size(); ++r)
      if (!heard_[r] || heard_[r]->state == RankWord::running) idle.push_back(static_cast<int>(r));
    if (!idle.empty())
      lines.insert(lines.begin(), ranks_on_hosts(idle, hosts_) + " not waiting in any collective");
    const std::vector<int> returned = ranks_in(RankWord::returned);
    if (!returned.empty()) lines.push_back(ranks_on_hosts(returned, hosts_) + " returned");
    std::string text = " " + std::string(heard_by) + " last heard:";
    for (std::size_t i = 0; i < lines.size(); ++i) text += (i ? "; " : " ") + lines[i];
    return text + ".";
  }

 private:
  // An exchange that ranks wait in: exchange #sequence of the group of id `group` and color
  // `color`, the ranks waiting in it and, of its members, those that have not posted it.
  struct Stuck {
    unsigned group = 0;
    int color = 0;
    std::uint64_t sequence = 0;
    CallRecord call;
    std::vector<int> waiting, missing;
  };

  // The exchanges that ranks wait in, by their words; the missing members are those heard from.
  std::vector<Stuck> exchanges_waited_in() const {
    std::vector<Stuck> stuck;
    const int ranks = static_cast<int>(heard_.size());
    for (int r = 0; r < ranks; ++r) {
      if (!heard_[r] || heard_[r]->state != RankWord::waits) continue;
      const RankWord& w = *heard_[r];
      const int color = layout_.color(w.group, r);
      auto s = std::find_if(stuck.begin(), stuck.end(), [&](const Stuck& e) {
        return e.group == w.group && e.color == color && e.sequence == w.sequence;
      });
      if (s == stuck.end()) {
        s = stuck.insert(stuck.end(), Stuck{w.group, color, w.sequence, w.call, {}, {}});
        for (int m = 0; m < ranks; ++m) {
          if (layout_.color(w.group, m) != color) continue;
          if (heard_[m] && heard_[m]->posted[w.group] < w.sequence) s->missing.push_back(m);
        }
      }
      s->waiting.push_back(r);
    }
    return stuck;
  }

  std::vector<int> ranks_in(RankWord::State state) const {
    std::vector<int> found;
    for (std::size_t r = 0; r < heard_.size(); ++r)
      if (heard_[r] && heard_[r]->state == state) found.push_back(static_cast<int>(r));
    return found;
  }

  std::vector<int> members(unsigned group, int color) const {
    std::vector<int> found;
    for (int m = 0; m < static_cast<int>(heard_.size()); ++m)
      if (layout_.color(group, m) == color) found.push_back(m);
    return found;
  }

  // "world ranks {1,2,3} wait in collective #1 on group {0,1,2,3} (mesh axes X, Y),
  //  all_reduce<float> of 8 elements[, which world rank 0 (host node0) has not called]"
  std::string line(const Stuck& s, bool with_missing) const {
    std::string text = ranks_plainly(s.waiting) + (s.waiting.size() == 1 ? " waits" : " wait") +
                       " in collective #" + std::to_string(s.sequence) + " on " +
                       group_name(members(s.group, s.color), layout_.labels[s.group]) + ", " +
                       describe(s.call);
    if (with_missing)
      text += ", which " + ranks_on_hosts(s.missing, hosts_) + " ha" +
              (s.missing.size() == 1 ? "s" : "ve") + " not called";
    return text;
  }

  GroupLayout layout_;
  std::vector<std::string> hosts_;              // [world rank], or empty
  std::vector<std::optional<RankWord>> heard_;  // [world rank] the latest word
};

}  // namespace tpx::detail
