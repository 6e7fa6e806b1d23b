/* `b .`: an instruction that branches to itself and changes nothing, so
 * nothing can ever end it; the self-loop guard ends it at once. */
int main(void)
{
    __asm__ volatile("1: b 1b");
    return 0;
}
