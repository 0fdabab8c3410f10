#pragma once
/// Advice that trains instead of guessing, in one include: the learning rate a batch can take
/// (lr.h), the batch that reaches the lowest held-out loss in the same training time (race.h), and
/// the run plan that follows from them (plan.h).
#include "batchwise/lr.h"
#include "batchwise/plan.h"
#include "batchwise/race.h"
