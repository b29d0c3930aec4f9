/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileContent;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.util.ContentFileUtil;
import org.apache.iceberg.util.SnapshotUtil;

/**
 * Which of a plan's file groups writers changed after its planned snapshot: the groups whose data files a later
 * snapshot names by a position delete or deletion vector, removes, or whose read delete files it removes. A
 * rewrite whose commit failed its validation leaves exactly these groups out (PlannedRewrite.commit).
 */
final class TouchedGroups {
  private TouchedGroups() {}

  /** Each data file the plan rewrites or rewrites the deletes of, by location, to its file group's index. */
  static Map<String, Integer> groupOf(PlannedFiles planned, JsonNode work) {
    Map<String, Integer> groupOf = new HashMap<>();
    for (int i = 0; i < planned.groupCount(); i++) {
      for (FileScanTask task : planned.group(i)) {
        groupOf.put(task.file().location(), i);
      }
      for (JsonNode path : work.path("groups").path(i).path("rewrite_pos")) {
        groupOf.put(planned.task(path.asText()).file().location(), i);
      }
    }
    return groupOf;
  }

  /**
   * The groups (by `groupOf`) whose files the snapshots after `planned` up to `head` name, or null when one of
   * them cannot be placed (a position delete file that names no single data file).
   */
  static Set<Integer> find(
      Table table, Snapshot planned, Snapshot head, PlannedFiles files, Map<String, Integer> groupOf) {
    Map<String, Set<Integer>> readers = new HashMap<>();
    for (Map.Entry<String, Integer> entry : groupOf.entrySet()) {
      for (DeleteFile delete : files.task(entry.getKey()).deletes()) {
        readers.computeIfAbsent(PlannedRewrite.identity(delete), k -> new TreeSet<>()).add(entry.getValue());
      }
    }
    Set<Integer> touched = new TreeSet<>();
    for (Snapshot s : SnapshotUtil.ancestorsBetween(table, head.snapshotId(), planned.snapshotId())) {
      for (DeleteFile delete : s.addedDeleteFiles(table.io())) {
        if (delete.content() != FileContent.POSITION_DELETES) {
          continue; // the rewritten files keep the planned sequence number: newer equality deletes still apply
        }
        String named = ContentFileUtil.referencedDataFileLocation(delete);
        if (named == null) {
          return null;
        }
        Integer group = groupOf.get(named);
        if (group != null) {
          touched.add(group);
        }
      }
      for (DataFile file : s.removedDataFiles(table.io())) {
        Integer group = groupOf.get(file.location());
        if (group != null) {
          touched.add(group);
        }
      }
      for (DeleteFile delete : s.removedDeleteFiles(table.io())) {
        touched.addAll(readers.getOrDefault(PlannedRewrite.identity(delete), Set.of()));
      }
    }
    return touched;
  }
}
