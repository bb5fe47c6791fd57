#ifndef PS_COMMON_DISPATCH_H_
#define PS_COMMON_DISPATCH_H_

// Exhaustive dispatch over a message Body (common/messages.h):
//
//   return std::visit(Overloaded{
//       [&](const PushRequestMsg& m) { ... },
//       [&](const PullRequestMsg& m) { ... },
//       [&]<typename M>(const M&) requires OneOf<M, AckMsg, HeartbeatMsg, ...> { refuse },
//   }, env.body);
//
// There is no catch-all: every alternative of Body is either handled or
// named in a refusal list, so a message type added to Body and forgotten by a
// handler does not compile. Header only; no state.

#include <type_traits>

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

}  // namespace ps

#endif  // PS_COMMON_DISPATCH_H_
