// Fuzz targets for every parser that reads untrusted bytes (Signet's `_FuzzTargets`).
//
//   SignetFuzz TARGET [libFuzzer options] CORPUS...   built with -sanitize=fuzzer (scripts/fuzz.sh)
//   SignetFuzz TARGET FILE-OR-DIR...                  an ordinary build: runs each input once
//
// Swift's `main` replaces libFuzzer's, so this main calls LLVMFuzzerRunDriver itself when the
// fuzzer runtime is linked in (found with dlsym: the fuzz build exports it), and otherwise runs
// the given inputs once, which is how the test suite keeps the seed corpus and every past crash
// passing in ordinary builds.
import Foundation
import Signet
#if canImport(Glibc)
import Glibc
#endif

/// The target, chosen once before the fuzzer starts calling in.
nonisolated(unsafe) var selected = ""

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    _ = _FuzzTargets.run(selected, data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}

typealias TestOneInput = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
typealias RunDriver =
    @convention(c) (UnsafeMutablePointer<Int32>, UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>, TestOneInput) -> Int32

let arguments = CommandLine.arguments
guard arguments.count >= 2, _FuzzTargets.names.contains(arguments[1]) else {
    FileHandle.standardError.write(Data("usage: SignetFuzz TARGET [options] CORPUS...; targets: \(_FuzzTargets.names.joined(separator: ", "))\n".utf8))
    exit(2)
}
selected = arguments[1]

if let symbol = dlsym(nil, "LLVMFuzzerRunDriver") {
    // libFuzzer sees the command line without the target name.
    var argv: [UnsafeMutablePointer<CChar>?] = [strdup(arguments[0])] + arguments.dropFirst(2).map { strdup($0) } + [nil]
    var argc = Int32(argv.count - 1)
    let status = argv.withUnsafeMutableBufferPointer { buffer -> Int32 in
        var pointer: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = buffer.baseAddress
        return unsafeBitCast(symbol, to: RunDriver.self)(&argc, &pointer, fuzzOneInput)
    }
    exit(status)
}

// Not a fuzzing build: run every input given (files, or every file in a directory) once.
var count = 0
for path in arguments.dropFirst(2) {
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
        FileHandle.standardError.write(Data("SignetFuzz: no such input \(path)\n".utf8))
        exit(2)
    }
    let files =
        isDirectory.boolValue
        ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
        : [path]
    for file in files {
        guard let data = FileManager.default.contents(atPath: file) else { continue }
        _ = _FuzzTargets.run(selected, Array(data))
        count += 1
    }
}
print("\(selected): \(count) inputs ran without a crash")
