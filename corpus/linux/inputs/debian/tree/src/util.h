#ifndef UTIL_H
#define UTIL_H
unsigned long factorial(int n);
#endif
