%% SPDX-License-Identifier: MIT
%% ask: one process owning a counter; the main process makes N asks in
%% sequence, each {add, 1, From} answered with the new value, and waits for
%% each reply (selective receive of {count, V}). Erlang's mailboxes are
%% unbounded: the spec's capacity does not apply. Run with one scheduler
%% (erl +S 1:1); ask2 is the same with every scheduler. Value: elapsed / N,
%% ns/ask. The clock runs from before the actor's spawn to after its exit
%% (a monitor's 'DOWN'), as weft's runs from before its spawn to its exit.
-module(ask).
-export([main/0, main/1, run/2, counter/1]).

main() -> main([]).
main(Args) -> run("ask", bench_peer:n(Args, 1000000)).

run(Name, N) ->
    T0 = bench_peer:now_ns(),
    {Actor, Ref} = spawn_monitor(fun() -> counter(0) end),
    Last = asks(Actor, N, 0),
    Actor ! stop,
    receive {'DOWN', Ref, process, Actor, normal} -> ok end,
    Elapsed = bench_peer:now_ns() - T0,
    bench_peer:check(Last =:= N, "last reply ~p /= ~p", [Last, N]),
    bench_peer:print(Name, Elapsed, N, "ns/ask").

%% The actor: nobody else touches C (actor32's too).
counter(C) ->
    receive
        {add, A, From} ->
            C2 = C + A,
            From ! {count, C2},
            counter(C2);
        stop ->
            ok
    end.

asks(_, 0, Last) ->
    Last;
asks(Actor, K, _) ->
    Actor ! {add, 1, self()},
    receive {count, V} -> asks(Actor, K - 1, V) end.
