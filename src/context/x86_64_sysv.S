/* SPDX-License-Identifier: MIT */
/*
 * Context switch for x86-64, System V ABI.
 *
 * void weft__ctx_jump(void **save_sp, void *to_sp)
 *   Saves the callee-saved registers (rbp, rbx, r12-r15), the MXCSR control
 *   bits and the x87 control word on the current stack, stores the stack
 *   pointer in *save_sp, then restores the same set from to_sp and continues
 *   there. Caller-saved registers need no saving: the call already told the
 *   compiler they are clobbered.
 *
 * Frame, from the saved stack pointer up:
 *   +0  MXCSR (4 bytes)  +4 x87 control word (2 bytes, 2 of padding)
 *   +8  r15  +16 r14  +24 r13  +32 r12  +40 rbx  +48 rbp  +56 return address
 *
 * The switch ends with ret. An indirect jmp to the popped address was
 * measured too: it leaves the call's entry on the CPU's return stack buffer
 * unpopped, so every ret after the switch mispredicts (23 ns per yield
 * against 9 ns with ret on this machine). With ret, a switch between two
 * contexts that both switched from the same call site (run_next in
 * sched.c, inlined where a task parks or yields) is predicted exactly,
 * and so are the returns after it as far as the two tasks' chains of
 * calls are alike; a switch from a different site (another kind of wait,
 * the scheduler loop, a task's exit) mispredicts there.
 *
 * A new context (built in C by weft__ctx_make) has r12 = argument, rbx =
 * entry function and the return address = weft__ctx_start, which calls
 * entry(arg). Entry must never return.
 */
    .text
    .globl weft__ctx_jump
    .hidden weft__ctx_jump
    .type weft__ctx_jump, @function
    .p2align 4
weft__ctx_jump:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    leaq -8(%rsp), %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
.Lresume:
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    leaq 8(%rsp), %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size weft__ctx_jump, .-weft__ctx_jump

    /* void weft__ctx_exit(void *to_sp): weft__ctx_jump's second half
     * alone, for a context that will never run again (a finished task):
     * nothing of it is saved. */
    .globl weft__ctx_exit
    .hidden weft__ctx_exit
    .type weft__ctx_exit, @function
    .p2align 4
weft__ctx_exit:
    .cfi_startproc
    movq %rdi, %rsi
    jmp .Lresume
    .cfi_endproc
    .size weft__ctx_exit, .-weft__ctx_exit

    .globl weft__ctx_start
    .hidden weft__ctx_start
    .type weft__ctx_start, @function
    .p2align 4
weft__ctx_start:
    .cfi_startproc
    .cfi_undefined rip          /* the outermost frame of a task's stack */
    movq %r12, %rdi
    callq *%rbx
    ud2
    .cfi_endproc
    .size weft__ctx_start, .-weft__ctx_start

    .section .note.GNU-stack,"",%progbits
