/* One instruction of the privileged system interface, chosen by argv[1],
 * executed in user mode:
 *   midr  mrc p15, 0, r0, c0, c0, 0    read the Main ID register
 *   vbar  mcr p15, 0, r0, c12, c0, 0   move the exception vectors
 *   sctlr mcr p15, 0, r0, c1, c0, 0    rewrite the system control register
 *                                      (r0 = 0: MMU and caches off)
 *   cps   cps #0x1f                    change mode to System
 *   msr   msr cpsr_c, r0 (r0 = 0xdf)   change mode to System, masking interrupts
 *                                      (Thumb-2 has no immediate form)
 * The coprocessor accesses are UNDEFINED at PL0: the kernel kills the
 * process with SIGILL.  CPS and MSR are not: in User mode CPS is a NOP and
 * MSR writes only the APSR's flags (ARM ARM, CPS and CPSRWriteByInstr), so
 * they fall through to `executed NAME mode=0x10` (still User) and exit 0. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "";
    unsigned value = 0;
    if (strcmp(which, "midr") == 0)
        __asm__ volatile("mrc p15, 0, %0, c0, c0, 0" : "=r"(value));
    else if (strcmp(which, "vbar") == 0)
        __asm__ volatile("mcr p15, 0, %0, c12, c0, 0" : : "r"(value));
    else if (strcmp(which, "sctlr") == 0)
        __asm__ volatile("mcr p15, 0, %0, c1, c0, 0" : : "r"(value));
    else if (strcmp(which, "cps") == 0)
        __asm__ volatile("cps #0x1f");
    else if (strcmp(which, "msr") == 0)
        __asm__ volatile("msr cpsr_c, %0" : : "r"(0xdfu));
    else {
        puts("usage: privileged midr|vbar|sctlr|cps|msr");
        return 2;
    }
    unsigned cpsr;
    __asm__ volatile("mrs %0, apsr" : "=r"(cpsr));
    printf("executed %s mode=%#x\n", which, cpsr & 0x1f);
    return 0;
}
