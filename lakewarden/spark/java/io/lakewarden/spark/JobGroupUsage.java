/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.TreeSet;
import org.apache.spark.SparkContext;
import org.apache.spark.status.AppStatusStore;
import org.apache.spark.status.TaskDataWrapper;
import org.apache.spark.status.api.v1.StageData;
import org.apache.spark.status.api.v1.StageStatus;
import scala.collection.Iterator;

/**
 * What Spark measured of a job group's stages, from the driver's status store (the AppStatusStore behind the Spark
 * UI and its REST API): the sums of every stage attempt the group's jobs ran, and the largest peak execution memory
 * of one of their Spark tasks. Every read is by key: a long-lived optimizer's store holds up to
 * spark.ui.retainedStages stages, and the store's own calls for a stage's attempts or its task summaries sort what
 * it holds (the summaries compute quantiles of every task metric and cache them back into the store). In one call
 * because through py4j each figure of each stage would be a round trip.
 */
public final class JobGroupUsage {
  private static final ObjectMapper JSON = new ObjectMapper();
  // the store's index of a stage attempt's tasks by their peak execution memory (Spark's TaskIndexNames.PEAK_MEM)
  private static final String PEAK_MEMORY_INDEX = "pem";

  private JobGroupUsage() {}

  /**
   * The figures as a JSON object whose keys are the fields of lakewarden's SparkUsage. The listener bus is drained
   * first (at most `drainMillis`), so what the group's last stage did is in the store.
   */
  public static String of(SparkContext context, String group, long drainMillis) throws Exception {
    try {
      context.listenerBus().waitUntilEmpty(drainMillis);
    } catch (Exception busy) {
      // the figures may miss the very last events of the task
    }
    AppStatusStore store = context.statusStore();
    int[] jobIds = context.statusTracker().getJobIdsForGroup(group);
    TreeSet<Integer> stageIds = new TreeSet<>();
    for (int jobId : jobIds) {
      try {
        Iterator<Object> stages = store.job(jobId).stageIds().iterator();
        while (stages.hasNext()) {
          stageIds.add((Integer) stages.next());
        }
      } catch (NoSuchElementException evicted) {
        // spark.ui.retainedJobs: nothing more to add
      }
    }
    long tasks = 0, cpuNanos = 0, runMs = 0, readBytes = 0, readRecords = 0, writtenBytes = 0, writtenRecords = 0;
    long shuffleBytes = 0, spilledBytes = 0, peakMemory = 0;
    for (int stageId : stageIds) {
      // Spark makes a new attempt only of one that failed: the next is looked for after a failed one alone
      for (int attemptId = 0; ; attemptId++) {
        StageData stage;
        try {
          stage = store.stageAttempt(stageId, attemptId, false, Collections.emptyList(), false, new double[0])._1();
        } catch (NoSuchElementException none) {
          break; // no such attempt, or the stage was evicted (spark.ui.retainedStages)
        }
        tasks += stage.numCompleteTasks() + stage.numFailedTasks() + stage.numKilledTasks();
        cpuNanos += stage.executorCpuTime();
        runMs += stage.executorRunTime();
        readBytes += stage.inputBytes();
        readRecords += stage.inputRecords();
        writtenBytes += stage.outputBytes();
        writtenRecords += stage.outputRecords();
        shuffleBytes += stage.shuffleWriteBytes();
        spilledBytes += stage.diskBytesSpilled();
        peakMemory = Math.max(peakMemory, largestPeak(store, stageId, attemptId));
        if (stage.status() != StageStatus.FAILED) {
          break;
        }
      }
    }
    Map<String, Long> figures = new LinkedHashMap<>();
    figures.put("jobs", (long) jobIds.length);
    figures.put("tasks", tasks);
    figures.put("cpu_ms", cpuNanos / 1_000_000);
    figures.put("run_ms", runMs);
    figures.put("read_bytes", readBytes);
    figures.put("read_records", readRecords);
    figures.put("written_bytes", writtenBytes);
    figures.put("written_records", writtenRecords);
    figures.put("shuffle_bytes", shuffleBytes);
    figures.put("spilled_bytes", spilledBytes);
    figures.put("peak_memory_bytes", peakMemory);
    return JSON.writeValueAsString(figures);
  }

  private static long largestPeak(AppStatusStore store, int stageId, int attemptId) throws Exception {
    int[] attempt = {stageId, attemptId};
    for (TaskDataWrapper task :
        store.store().view(TaskDataWrapper.class).parent(attempt).index(PEAK_MEMORY_INDEX).reverse().max(1)) {
      return Math.max(task.peakExecutionMemory(), 0);
    }
    return 0;
  }
}
