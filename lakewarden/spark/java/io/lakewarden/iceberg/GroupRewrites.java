/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.lang.reflect.Constructor;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.SortOrder;
import org.apache.iceberg.Table;
import org.apache.iceberg.actions.FileRewriteRunner;
import org.apache.iceberg.actions.ImmutableRewriteDataFiles;
import org.apache.iceberg.actions.RewriteDataFiles;
import org.apache.iceberg.actions.RewriteFileGroup;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.SparkSession;

/**
 * A task's file groups rewritten on Spark by Iceberg's own rewrite runners: the bin-pack runner, or for a clustering
 * group the sort or z-order runner. They are package-private in Iceberg's Spark module, so they are made through
 * reflection and driven through their public interface, as Iceberg's RewriteDataFiles action drives them; groups
 * run several at once, as the action runs them. Here rather than in Python because a group driven through py4j
 * takes dozens of round trips, which for the small files streaming writers leave cost a share of the task's CPU.
 */
public final class GroupRewrites {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String RUNNERS = "org.apache.iceberg.spark.actions.";
  // what a Spark job started from a pool thread must carry of the caller's: its job group (what canceling the task
  // cancels, and whose jobs its usage adds up), description and interruption on cancel
  private static final String[] INHERITED = {
    "spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"
  };

  private GroupRewrites() {}

  /**
   * Rewrites every group of `plan` that has files to rewrite, up to `concurrency` at once, and records what each
   * wrote (PlannedRewrite.rewrote). Returns, by group index, the locations each group wrote, as a JSON object. When a
   * group fails, the files the others wrote are deleted and the first failure is thrown as it was.
   */
  public static String run(SparkSession spark, PlannedRewrite plan, int concurrency) throws Exception {
    Table table = plan.table();
    List<Integer> indexes = new ArrayList<>();
    List<RewriteFileGroup> groups = new ArrayList<>();
    List<FileRewriteRunner<?, ?, ?, ?>> runners = new ArrayList<>();
    int outputSpec = table.spec().specId();
    for (int i = 0; i < plan.groupCount(); i++) {
      List<FileScanTask> tasks = plan.group(i);
      if (tasks.isEmpty()) {
        continue;
      }
      JsonNode input = plan.groupInput(i);
      RewriteDataFiles.FileGroupInfo info =
          ImmutableRewriteDataFiles.FileGroupInfo.builder()
              .globalIndex(i)
              .partitionIndex(0)
              .partition(tasks.get(0).file().partition())
              .build();
      indexes.add(i);
      groups.add(
          new RewriteFileGroup(
              info,
              tasks,
              outputSpec,
              input.path("max_file_size").asLong(),
              input.path("split_size").asLong(),
              input.path("expected_files").asInt(1)));
      runners.add(runner(spark, table, input.path("clustering")));
    }
    List<Set<DataFile>> written = rewriteAll(spark, runners, groups, concurrency, plan);
    ObjectNode out = JSON.createObjectNode();
    for (int k = 0; k < indexes.size(); k++) {
      out.set(String.valueOf(indexes.get(k)), JSON.readTree(plan.rewrote(indexes.get(k), written.get(k))));
    }
    return JSON.writeValueAsString(out);
  }

  /** Iceberg's runner for a group: bin-pack, or the sort or z-order runner its clustering names. */
  private static FileRewriteRunner<?, ?, ?, ?> runner(SparkSession spark, Table table, JsonNode clustering)
      throws ReflectiveOperationException {
    FileRewriteRunner<?, ?, ?, ?> runner;
    if (clustering.isMissingNode() || clustering.isNull()) {
      runner = construct("SparkBinPackFileRewriteRunner", spark, table, null, null);
    } else if ("sort".equals(clustering.path("kind").asText())) {
      int orderId = clustering.path("sort_order_id").asInt();
      SortOrder order = table.sortOrders().get(orderId);
      if (order == null) { // looked for by the caller first, which tells a stale plan by it
        throw new IllegalStateException("the table has no sort order " + orderId);
      }
      runner = construct("SparkSortFileRewriteRunner", spark, table, SortOrder.class, order);
    } else {
      List<String> columns = new ArrayList<>();
      clustering.path("columns").forEach(column -> columns.add(column.asText()));
      runner = construct("SparkZOrderFileRewriteRunner", spark, table, List.class, columns);
    }
    runner.init(new HashMap<>());
    return runner;
  }

  /** A runner made by its package-private constructor: (spark, table), or (spark, table, what it clusters by). */
  private static FileRewriteRunner<?, ?, ?, ?> construct(
      String name, SparkSession spark, Table table, Class<?> byType, Object by)
      throws ReflectiveOperationException {
    Class<?> runner = Class.forName(RUNNERS + name);
    Constructor<?> constructor =
        byType == null
            ? runner.getDeclaredConstructor(SparkSession.class, Table.class)
            : runner.getDeclaredConstructor(SparkSession.class, Table.class, byType);
    constructor.setAccessible(true);
    Object made = byType == null ? constructor.newInstance(spark, table) : constructor.newInstance(spark, table, by);
    return (FileRewriteRunner<?, ?, ?, ?>) made;
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  private static Set<DataFile> rewrite(FileRewriteRunner runner, RewriteFileGroup group) {
    return (Set<DataFile>) runner.rewrite(group);
  }

  private static List<Set<DataFile>> rewriteAll(
      SparkSession spark,
      List<FileRewriteRunner<?, ?, ?, ?>> runners,
      List<RewriteFileGroup> groups,
      int concurrency,
      PlannedRewrite plan)
      throws Exception {
    List<Set<DataFile>> written = new ArrayList<>();
    if (groups.size() == 1) {
      written.add(rewrite(runners.get(0), groups.get(0)));
      return written;
    }
    SparkContext context = spark.sparkContext();
    Map<String, String> inherited = new HashMap<>();
    for (String key : INHERITED) {
      inherited.put(key, context.getLocalProperty(key));
    }
    ExecutorService pool =
        Executors.newFixedThreadPool(
            Math.max(1, Math.min(groups.size(), concurrency)),
            work -> {
              Thread thread = new Thread(work, "lakewarden-group-rewrite");
              thread.setDaemon(true);
              return thread;
            });
    List<Future<Set<DataFile>>> futures = new ArrayList<>();
    try {
      for (int k = 0; k < groups.size(); k++) {
        FileRewriteRunner<?, ?, ?, ?> runner = runners.get(k);
        RewriteFileGroup group = groups.get(k);
        futures.add(
            pool.submit(
                () -> {
                  SparkSession.setActiveSession(spark);
                  inherited.forEach(context::setLocalProperty);
                  return rewrite(runner, group);
                }));
      }
      Exception failure = null;
      for (Future<Set<DataFile>> future : futures) {
        try {
          written.add(future.get());
        } catch (ExecutionException e) {
          if (failure == null) {
            failure = e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
          }
        }
      }
      if (failure != null) {
        for (Set<DataFile> files : written) {
          for (DataFile file : files) {
            plan.table().io().deleteFile(file.location());
          }
        }
        throw failure;
      }
      return written;
    } finally {
      pool.shutdownNow();
    }
  }
}
