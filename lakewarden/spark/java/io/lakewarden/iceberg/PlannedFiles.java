/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import org.apache.iceberg.BaseFileScanTask;
import org.apache.iceberg.ContentFileParser;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.ManifestFile;
import org.apache.iceberg.ManifestFiles;
import org.apache.iceberg.ManifestReader;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.PartitionSpecParser;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SchemaParser;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableUtil;
import org.apache.iceberg.expressions.ExpressionParser;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.expressions.ResidualEvaluator;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.util.JsonUtil;

/**
 * The files one optimizing task's plan names, found in its planned snapshot and checked against the plan: the
 * data files of each file group as Iceberg scan tasks (with the delete files Iceberg applies to them), the ones
 * whose position deletes become files of their own, and the delete files the task removes.
 */
final class PlannedFiles {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final Table table;
  private final Snapshot snapshot;
  private final List<List<FileScanTask>> groups = new ArrayList<>();
  private final List<FileScanTask> positionTasks = new ArrayList<>();
  private final Map<String, FileScanTask> byPath = new HashMap<>();
  private final Map<String, DeleteFile> removed = new LinkedHashMap<>();
  private boolean described = false;

  private PlannedFiles(Table table, Snapshot snapshot) {
    this.table = table;
    this.snapshot = snapshot;
  }

  /**
   * `work` is the task's input as lakewarden's protocol writes it (OptimizingInput): `filter`, `groups`
   * (`rewrite`, `rewrite_pos`, `deletes`) and `remove_deletes` are read. Fails with PlanMismatchException when a
   * planned data file is not in the snapshot, when Iceberg applies a delete file to one that its group did not
   * name, or when a delete file to remove is not live in the snapshot.
   *
   * <p>When the plan describes its files and nothing can apply to them (describable()), their scan tasks are
   * made from those descriptions and the snapshot's manifests are not read: for the small files streaming
   * writers leave, reading every manifest of the snapshot again is most of a task's time outside Spark. Such a
   * plan is checked against its snapshot (verify()) only when its task fails.
   */
  static PlannedFiles find(Table table, Snapshot snapshot, JsonNode work) throws IOException {
    if (describable(table, snapshot, work)) {
      return described(table, snapshot, work);
    }
    return scanned(table, snapshot, work);
  }

  /** The planned files found by scanning the snapshot, and checked against the plan. */
  static PlannedFiles scanned(Table table, Snapshot snapshot, JsonNode work) throws IOException {
    PlannedFiles plan = new PlannedFiles(table, snapshot);
    Map<String, Set<String>> allowedDeletes = new HashMap<>();
    for (JsonNode group : work.path("groups")) {
      Set<String> deletes = strings(group.path("deletes"));
      for (String path : strings(group.path("rewrite"))) {
        allowedDeletes.put(path, deletes);
      }
      for (String path : strings(group.path("rewrite_pos"))) {
        allowedDeletes.put(path, deletes);
      }
    }
    if (!allowedDeletes.isEmpty()) {
      plan.scan(work.path("filter").asText(), allowedDeletes);
    }
    for (JsonNode group : work.path("groups")) {
      plan.groups.add(plan.tasksOf(group.path("rewrite")));
      plan.positionTasks.addAll(plan.tasksOf(group.path("rewrite_pos")));
    }
    plan.findRemoved(strings(work.path("remove_deletes")));
    return plan;
  }

  /**
   * Whether the plan's files can be taken as it describes them: every file group describes each file it
   * rewrites (`files`, the data files of `rewrite` in order), no group rewrites deletes and the task removes
   * none, and the snapshot has no delete manifest, so no delete file can apply to a planned file (the check
   * scanned() makes holds by itself). Not for format version 3: a rewrite keeps each
   * row's lineage, which needs the files' first row ids as the manifests have them; not for encrypted tables,
   * whose files' key metadata a plan does not carry.
   */
  private static boolean describable(Table table, Snapshot snapshot, JsonNode work) {
    JsonNode groups = work.path("groups");
    if (groups.size() == 0 || work.path("remove_deletes").size() > 0) {
      return false;
    }
    for (JsonNode group : groups) {
      JsonNode files = group.path("files");
      JsonNode rewrite = group.path("rewrite");
      if (group.path("rewrite_pos").size() > 0
          || group.path("deletes").size() > 0
          || files.size() != rewrite.size()) {
        return false;
      }
      for (int i = 0; i < files.size(); i++) {
        if (!files.get(i).path("path").asText().equals(rewrite.get(i).asText())) {
          return false;
        }
      }
    }
    return TableUtil.formatVersion(table) < 3
        && !table.properties().containsKey("encryption.key-id")
        && snapshot.deleteManifests(table.io()).isEmpty();
  }

  /** The planned files as the plan describes them, as scan tasks of the snapshot's schema and no residual. */
  private static PlannedFiles described(Table table, Snapshot snapshot, JsonNode work) throws IOException {
    PlannedFiles plan = new PlannedFiles(table, snapshot);
    plan.described = true;
    Integer schemaId = snapshot.schemaId();
    Schema schema = schemaId != null ? table.schemas().get(schemaId) : null;
    String schemaJson = SchemaParser.toJson(schema != null ? schema : table.schema());
    Map<Integer, String> specJson = new HashMap<>();
    ResidualEvaluator residuals = ResidualEvaluator.unpartitioned(Expressions.alwaysTrue());
    for (JsonNode group : work.path("groups")) {
      List<FileScanTask> tasks = new ArrayList<>();
      for (JsonNode node : group.path("files")) {
        DataFile file = dataFile(table, node);
        PartitionSpec spec = table.specs().get(file.specId());
        String specString = specJson.computeIfAbsent(file.specId(), id -> PartitionSpecParser.toJson(spec));
        FileScanTask task = new BaseFileScanTask(file, new DeleteFile[0], schemaJson, specString, residuals);
        tasks.add(task);
        plan.byPath.put(file.location(), task);
      }
      plan.groups.add(tasks);
    }
    return plan;
  }

  /**
   * A data file as the plan describes it (lakewarden's PlannedFile: path, format, spec_id, partition values in
   * the spec's order, size, records), made by Iceberg's own ContentFileParser, which reads each partition value
   * by its type in the spec.
   */
  private static DataFile dataFile(Table table, JsonNode planned) throws IOException {
    int specId = planned.path("spec_id").asInt();
    PartitionSpec spec = table.specs().get(specId);
    if (spec == null) {
      throw new PlanMismatchException("the table has no partition spec " + specId);
    }
    ObjectNode file = JSON.createObjectNode();
    file.put("spec-id", specId);
    file.put("content", "DATA");
    file.put("file-path", planned.path("path").asText());
    file.put("file-format", planned.path("format").asText());
    JsonNode values = planned.path("partition");
    if (values.size() != spec.fields().size()) {
      throw new PlanMismatchException(
          "a planned file has "
              + values.size()
              + " partition value(s), spec "
              + specId
              + " has "
              + spec.fields().size());
    }
    if (spec.isPartitioned()) {
      ObjectNode partition = file.putObject("partition");
      for (int i = 0; i < values.size(); i++) {
        partition.set(String.valueOf(spec.fields().get(i).fieldId()), values.get(i));
      }
    }
    file.put("file-size-in-bytes", planned.path("size").asLong());
    file.put("record-count", planned.path("records").asLong());
    // Iceberg's parser reads its own (shaded) Jackson trees: the file goes across as text
    return (DataFile) ContentFileParser.fromJson(JsonUtil.mapper().readTree(file.toString()), table.specs());
  }

  /** Whether the files were taken as the plan describes them, unchecked against the snapshot. */
  boolean described() {
    return described;
  }

  private static Set<String> strings(JsonNode array) {
    Set<String> values = new HashSet<>();
    for (JsonNode value : array) {
      values.add(value.asText());
    }
    return values;
  }

  private List<FileScanTask> tasksOf(JsonNode paths) {
    List<FileScanTask> tasks = new ArrayList<>();
    for (JsonNode path : paths) {
      tasks.add(byPath.get(path.asText()));
    }
    return tasks;
  }

  private void scan(String filterJson, Map<String, Set<String>> allowedDeletes) throws IOException {
    try (CloseableIterable<FileScanTask> files =
        table
            .newScan()
            .useSnapshot(snapshot.snapshotId())
            .filter(ExpressionParser.fromJson(filterJson))
            .ignoreResiduals()
            .planFiles()) {
      for (FileScanTask task : files) {
        if (allowedDeletes.containsKey(task.file().location())) {
          byPath.put(task.file().location(), task);
        }
      }
    }
    Set<String> missing = new TreeSet<>(allowedDeletes.keySet());
    missing.removeAll(byPath.keySet());
    if (!missing.isEmpty()) {
      throw new PlanMismatchException(
          missing.size()
              + " planned data file(s) are not in snapshot "
              + snapshot.snapshotId()
              + ": "
              + first(missing));
    }
    for (Map.Entry<String, FileScanTask> entry : byPath.entrySet()) {
      Set<String> unplanned = new TreeSet<>();
      for (DeleteFile delete : entry.getValue().deletes()) {
        if (!allowedDeletes.get(entry.getKey()).contains(delete.location())) {
          unplanned.add(delete.location());
        }
      }
      if (!unplanned.isEmpty()) {
        throw new PlanMismatchException(
            "Iceberg applies delete files to "
                + entry.getKey()
                + " that the plan did not name: "
                + first(unplanned));
      }
    }
  }

  /**
   * The delete files to remove: those that apply to the planned data files come with their scan tasks; only
   * the others (a last task's shared ones) are read from the snapshot's delete manifests.
   */
  private void findRemoved(Set<String> paths) throws IOException {
    if (paths.isEmpty()) {
      return;
    }
    for (FileScanTask task : byPath.values()) {
      for (DeleteFile delete : task.deletes()) {
        if (paths.contains(delete.location())) {
          removed.putIfAbsent(delete.location(), delete);
        }
      }
    }
    if (removed.size() < paths.size()) {
      for (ManifestFile manifest : snapshot.deleteManifests(table.io())) {
        try (ManifestReader<DeleteFile> reader =
            ManifestFiles.readDeleteManifest(manifest, table.io(), table.specs())) {
          for (DeleteFile delete : reader) {
            if (paths.contains(delete.location()) && !removed.containsKey(delete.location())) {
              removed.put(delete.location(), delete.copy());
            }
          }
        }
      }
    }
    Set<String> missing = new TreeSet<>(paths);
    missing.removeAll(removed.keySet());
    if (!missing.isEmpty()) {
      throw new PlanMismatchException(
          missing.size() + " delete file(s) to remove are not live in the planned snapshot: " + first(missing));
    }
  }

  private static String first(Set<String> paths) {
    List<String> shown = new ArrayList<>();
    for (String path : paths) {
      if (shown.size() == 3) {
        break;
      }
      shown.add(path);
    }
    return shown.toString();
  }

  /** How many file groups the plan has. */
  int groupCount() {
    return groups.size();
  }

  /** The scan tasks of file group `index` whose files are rewritten, in the plan's order. */
  List<FileScanTask> group(int index) {
    return groups.get(index);
  }

  /** The scan tasks of every group's files whose deletes become files of their own. */
  List<FileScanTask> positionTasks() {
    return positionTasks;
  }

  /** The planned data file's scan task. */
  FileScanTask task(String path) {
    return Objects.requireNonNull(byPath.get(path), path);
  }

  /** The delete files the task removes, by location, in the order they were found. */
  Map<String, DeleteFile> removed() {
    return Collections.unmodifiableMap(removed);
  }
}
