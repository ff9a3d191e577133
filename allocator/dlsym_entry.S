// dlsym and dlvsym as libmemtrace.so exports them (Note [Interposing dlsym] in
// allocator/lookup_hooks.cpp).
//
// glibc's dlsym answers RTLD_NEXT and RTLD_DEFAULT relative to the object that called it,
// which it finds from its return address. So for those two handles these stubs jump to the
// real function, leaving the caller's return address in place: a C function that called it
// would make every such lookup look as if libmemtrace.so had asked (RTLD_NEXT would skip the
// wrong objects; RTLD_DEFAULT from a library loaded RTLD_LOCAL would lose that library's own
// dependencies). A real handle does not depend on the caller: memtrace_dlsym_with_handle, in
// C++, asks the real dlsym and may hand back a hook instead.
//
// x86-64 only (the platform libmemtrace.so is built and tested for); elsewhere the file is
// empty and dlsym is not interposed.
#if defined(__x86_64__)

        .hidden memtrace_real_dlsym
        .hidden memtrace_real_dlvsym
        .hidden memtrace_resolve_dlsym
        .hidden memtrace_resolve_dlvsym
        .hidden memtrace_dlsym_with_handle
        .hidden memtrace_dlvsym_with_handle

        .text

// void* dlsym(void* handle, const char* name): handle in %rdi, name in %rsi.
        .globl  dlsym
        .type   dlsym, @function
        .p2align 4
dlsym:
        .cfi_startproc
        endbr64
        testq   %rdi, %rdi                      // RTLD_DEFAULT
        je      1f
        cmpq    $-1, %rdi                       // RTLD_NEXT
        je      1f
        jmp     memtrace_dlsym_with_handle
1:      movq    memtrace_real_dlsym(%rip), %rax
        testq   %rax, %rax
        je      2f
        jmp     *%rax
        // Not found yet: find it, keeping the arguments (the stack is 16-byte aligned again
        // after two pushes and 8 bytes, as the call needs).
2:      pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp
        .cfi_adjust_cfa_offset 8
        call    memtrace_resolve_dlsym
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        je      3f
        jmp     *%rax
3:      ret                                     // no C library dlsym: NULL
        .cfi_endproc
        .size   dlsym, .-dlsym

// void* dlvsym(void* handle, const char* name, const char* version): %rdi, %rsi, %rdx.
        .globl  dlvsym
        .type   dlvsym, @function
        .p2align 4
dlvsym:
        .cfi_startproc
        endbr64
        testq   %rdi, %rdi
        je      1f
        cmpq    $-1, %rdi
        je      1f
        jmp     memtrace_dlvsym_with_handle
1:      movq    memtrace_real_dlvsym(%rip), %rax
        testq   %rax, %rax
        je      2f
        jmp     *%rax
        // Three pushes: aligned for the call.
2:      pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        pushq   %rdx
        .cfi_adjust_cfa_offset 8
        call    memtrace_resolve_dlvsym
        popq    %rdx
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        je      3f
        jmp     *%rax
3:      ret
        .cfi_endproc
        .size   dlvsym, .-dlvsym

#endif

        .section .note.GNU-stack,"",@progbits
