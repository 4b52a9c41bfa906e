%% SPDX-License-Identifier: MIT
%% actor32: one process owning a counter (ask.erl's) and 32 client
%% processes, each making N/32 asks in sequence and waiting for each reply.
%% Run with 2 schedulers (erl +S 2:2: weft's 2 workers). Value: elapsed /
%% N, ns/ask. The clock runs from before the actor's spawn to after the
%% clients have finished and the actor has exited.
-module(actor32).
-export([main/0, main/1]).

-define(CLIENTS, 32).

main() -> main([]).
main(Args) ->
    N0 = bench_peer:n(Args, 100000),
    N = case N0 - N0 rem ?CLIENTS of 0 -> ?CLIENTS; V -> V end,
    T0 = bench_peer:now_ns(),
    {Actor, Ref} = spawn_monitor(fun() -> ask:counter(0) end),
    Self = self(),
    [spawn_link(fun() -> Self ! {done, asks(Actor, N div ?CLIENTS, 0)} end)
     || _ <- lists:seq(1, ?CLIENTS)],
    Max = lists:max([receive {done, L} -> L end || _ <- lists:seq(1, ?CLIENTS)]),
    Actor ! stop,
    receive {'DOWN', Ref, process, Actor, normal} -> ok end,
    Elapsed = bench_peer:now_ns() - T0,
    bench_peer:check(Max =:= N, "largest reply ~p /= ~p", [Max, N]),
    bench_peer:print("actor32", Elapsed, N, "ns/ask").

asks(_, 0, Max) ->
    Max;
asks(Actor, K, Max) ->
    Actor ! {add, 1, self()},
    receive {count, V} -> asks(Actor, K - 1, max(V, Max)) end.
