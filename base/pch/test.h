// The prefix of every test translation unit (its PCH is //base/pch:test):
// lib.h and GoogleTest.
#ifndef RUNREAPER_BASE_PCH_TEST_H_
#define RUNREAPER_BASE_PCH_TEST_H_

#include "base/pch/lib.h"
#include "gtest/gtest.h"

#endif  // RUNREAPER_BASE_PCH_TEST_H_
