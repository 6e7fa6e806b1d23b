/* A loop with no system call at all, forever: only the guards the tracer
 * checks between instructions can end it. */
int main(void)
{
    for (volatile unsigned turns = 0;; turns++)
        ;
}
