#ifndef PS_COMMON_BASE_DISPATCH_H_
#define PS_COMMON_BASE_DISPATCH_H_

// Exhaustive dispatch over a message Body (common/wire/messages.h):
//
//   return std::visit(Overloaded{
//       [&](const PushRequestMsg& m) { ... },
//       [&](const PullRequestMsg& m) { ... },
//       OnlyFor<AckMsg, HeartbeatMsg, ...>([&](const auto&) { refuse }),
//   }, env.body);
//
// There is no catch-all: every alternative of Body is either handled or
// named in a refusal list, so a message type added to Body and forgotten by a
// handler does not compile. Header only; no state.

#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"

namespace ps {

// The lambdas of a visitor as one overload set.
template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

// True when T is one of Ts: the constraint of a refusal list.
template <typename T, typename... Ts>
concept OneOf = (std::is_same_v<T, Ts> || ...);

// A visitor arm for exactly the message types Ms (a refusal list, or types
// one body handles alike): f(m) for those, no overload for any other.
template <typename F, typename... Ms>
struct OnlyForArm {
  F f;
  // Forwards only: what f requires (a lock held) is checked in f itself.
  template <typename M>
  requires OneOf<M, Ms...>
  auto operator()(const M& m) const ABSL_NO_THREAD_SAFETY_ANALYSIS { return f(m); }
};
template <typename... Ms, typename F>
OnlyForArm<F, Ms...> OnlyFor(F f) {
  return {std::move(f)};
}

}  // namespace ps

#endif  // PS_COMMON_BASE_DISPATCH_H_
