/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

/**
 * A task's plan names files its planned snapshot does not have as planned: the plan is stale, and the server
 * plans again (Python: lakewarden.optimizer.rewrite.PlanMismatch).
 */
public final class PlanMismatchException extends RuntimeException {
  PlanMismatchException(String message) {
    super(message);
  }
}
