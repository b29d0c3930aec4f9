/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.util.function.Supplier;
import org.apache.iceberg.exceptions.NotFoundException;
import software.amazon.awssdk.awscore.exception.AwsErrorDetails;
import software.amazon.awssdk.awscore.exception.AwsServiceException;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.model.HeadBucketRequest;
import software.amazon.awssdk.services.s3.model.NoSuchBucketException;

/**
 * A store's refusal that no retry changes (wrong or expired keys, a prefix the credentials do not cover, a bucket
 * that does not exist, a request sent to another region), naming the object. The AWS SDK's own exception names
 * neither the object nor, for a HEAD, the reason (its body is empty): "null (Service: S3, Status Code: 403)".
 * domain/failures.py fails a task at once on this class.
 */
final class StoreRefusal extends RuntimeException {
  private final int status;

  private StoreRefusal(String location, int status, String reason, AwsServiceException cause) {
    super(location + ": the store refused the request (" + status + " " + reason + ")", cause);
    this.status = status;
  }

  int status() {
    return status;
  }

  /**
   * `failure` as a StoreRefusal naming `location` if it is one, an object that is not there as Iceberg's
   * NotFoundException naming it, else `failure` itself. A HEAD answered 404 has no body to tell a missing bucket
   * from a missing object: then `client` is asked whether the bucket is there.
   */
  static RuntimeException of(String location, RuntimeException failure, Supplier<S3Client> client) {
    for (Throwable cause = failure; cause != null; cause = cause.getCause()) {
      if (cause instanceof AwsServiceException) {
        AwsServiceException service = (AwsServiceException) cause;
        String reason = reason(service);
        if (reason == null && service.statusCode() == 404 && !bucketExists(client, location)) {
          reason = "the bucket does not exist";
        }
        if (reason != null) {
          return new StoreRefusal(location, service.statusCode(), reason, service);
        }
        if (service.statusCode() == 404 && !(failure instanceof NotFoundException)) {
          return new NotFoundException(service, "Location does not exist: %s", location);
        }
        return failure;
      }
      if (cause.getCause() == cause) {
        break;
      }
    }
    return failure;
  }

  /** Why the store refused for good, or null when the failure may pass (throttling, 5xx, a missing object). */
  private static String reason(AwsServiceException failure) {
    AwsErrorDetails details = failure.awsErrorDetails();
    String code = details == null || details.errorCode() == null ? "" : details.errorCode();
    switch (failure.statusCode()) {
      case 301:
      case 307:
        return "the bucket is in another region or behind another endpoint" + detail(code);
      case 400:
        // S3 answers a request it waited too long for with 400 RequestTimeout: that one may pass
        return "RequestTimeout".equals(code) ? null : "a request the store rejects" + detail(code);
      case 401:
      case 403:
        return "access denied: the keys are wrong or expired, or not allowed this object" + detail(code);
      case 404:
        return "NoSuchBucket".equals(code) ? "the bucket does not exist" + detail(code) : null;
      default:
        return null;
    }
  }

  private static boolean bucketExists(Supplier<S3Client> client, String location) {
    try {
      client.get().headBucket(HeadBucketRequest.builder().bucket(StorageFileIO.bucketOf(location)).build());
      return true;
    } catch (NoSuchBucketException e) {
      return false;
    } catch (AwsServiceException e) {
      return e.statusCode() != 404;
    } catch (RuntimeException e) {
      return true; // the store did not say it is missing: the object is
    }
  }

  private static String detail(String code) {
    return code.isEmpty() ? "" : ", " + code;
  }
}
