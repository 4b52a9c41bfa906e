%% SPDX-License-Identifier: MIT
%% ring: M=1,000 processes in a ring, each forwarding the token it receives,
%% decremented, to the next; the token starts at N in the first, and the
%% process that receives 0 sends it to the main process. Erlang's mailboxes
%% are unbounded: the spec's capacity does not apply. One scheduler
%% (erl +S 1:1). Value: elapsed / N, ns/hop.
%%
%% Spawning is not timed: each process is told its successor and answers
%% `ready`, and the clock runs from before the first send to the receipt of
%% the final token.
-module(ring).
-export([main/0, main/1]).

-define(M, 1000).

main() -> main([]).
main(Args) ->
    N = bench_peer:n(Args, 1000000),
    Self = self(),
    Ring = [spawn(fun() -> link_up(Self) end) || _ <- lists:seq(1, ?M)],
    [First | _] = Ring,
    lists:foreach(
        fun({P, Next}) -> P ! {next, Next} end,
        lists:zip(Ring, tl(Ring) ++ [First])),
    [receive {ready, P} -> ok end || P <- Ring],
    T0 = bench_peer:now_ns(),
    First ! {token, N},
    Token = receive {done, T} -> T end,
    Elapsed = bench_peer:now_ns() - T0,
    bench_peer:check(Token =:= 0, "final token ~p /= 0", [Token]),
    bench_peer:print("ring", Elapsed, N, "ns/hop").

link_up(Main) ->
    receive {next, Next} -> Main ! {ready, self()}, hop(Next, Main) end.

hop(Next, Main) ->
    receive
        {token, 0} -> Main ! {done, 0};
        {token, T} -> Next ! {token, T - 1}, hop(Next, Main)
    end.
