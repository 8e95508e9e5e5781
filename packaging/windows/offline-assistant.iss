; Inno Setup script around the PyInstaller folder: a per-user install (no admin prompt), a Start-menu
; entry, an optional desktop icon, and an uninstaller that removes the program but leaves the user's
; chats (%LOCALAPPDATA%\offline-assistant) unless they tick the box on the last page.
;
; Build (on Windows, from the repository root, after packaging\windows\build.ps1 made dist\offline-assistant):
;     "C:\Program Files (x86)\Inno Setup 6\ISCC.exe" /DAppVersion=0.1.0 /DLlamaBackend=vulkan packaging\windows\offline-assistant.iss
; Output: dist\offline-assistant-0.1.0-windows-x64-setup.exe

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
; The GPU backend build.ps1 built llama.cpp with (/DLlamaBackend=vulkan, cuda or cpu): checked below.
#ifndef LlamaBackend
  #define LlamaBackend "vulkan"
#endif
#define AppName "Offline Assistant"
#define AppExe "assistant-gui.exe"
#define SourceDir "..\..\dist\offline-assistant"

; llama.cpp's backend DLLs are loaded by ggml at run time from _internal\llama_cpp\lib (the [Files]
; line below takes that whole folder); refuse to build an installer from a bundle without them.
#define LlamaLib AddBackslash(SourcePath) + SourceDir + "\_internal\llama_cpp\lib"
#if !FileExists(LlamaLib + "\ggml-cpu-x64.dll")
  #error No ggml-cpu-x64.dll in dist\offline-assistant\_internal\llama_cpp\lib: build the bundle with packaging\windows\build.ps1
#endif
#if LlamaBackend != "cpu"
  #if !FileExists(LlamaLib + "\ggml-" + LlamaBackend + ".dll")
    #error The bundle lacks the GPU backend named by /DLlamaBackend (ggml-vulkan.dll or ggml-cuda.dll): build it with packaging\windows\build.ps1
  #endif
#endif

[Setup]
; A fixed AppId: upgrades replace the previous install instead of adding a second one.
AppId={{6F1C8E0A-2B1D-4C55-9E7A-0D4B8C2A91F3}
AppName={#AppName}
AppVersion={#AppVersion}
AppPublisher=Offline Assistant
DefaultDirName={localappdata}\Programs\offline-assistant
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename=offline-assistant-{#AppVersion}-windows-x64-setup
SetupIconFile=..\..\assets\icon.ico
UninstallDisplayIcon={app}\{#AppExe}
; The GGUF models are already compressed: lzma2 on them costs minutes for a few percent.
Compression=lzma2/fast
SolidCompression=no
WizardStyle=modern
ShowLanguageDialog=auto
CloseApplications=yes

[Languages]
Name: "en"; MessagesFile: "compiler:Default.isl"
Name: "zh_CN"; MessagesFile: "compiler:Languages\ChineseSimplified.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
; Everything, subfolders included: _internal\llama_cpp\lib holds every backend (ggml-cpu-*.dll, one per
; CPU generation, and ggml-vulkan.dll or ggml-cuda.dll), which ggml picks from at run time.
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\{#AppName}"; Filename: "{app}\{#AppExe}"
Name: "{group}\{cm:UninstallProgram,{#AppName}}"; Filename: "{uninstallexe}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExe}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExe}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; Only what the program folder may hold besides installed files (none expected: the app writes
; to %LOCALAPPDATA%\offline-assistant, never to {app}).
Type: filesandordirs; Name: "{app}\_internal\__pycache__"

[Code]
var
  RemoveData: Boolean;

function InitializeUninstall(): Boolean;
begin
  RemoveData := MsgBox('Also delete your chats, memories and downloaded models?' + #13#10 +
    ExpandConstant('{localappdata}\offline-assistant'), mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES;
  Result := True;
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
begin
  if (CurUninstallStep = usPostUninstall) and RemoveData then
    DelTree(ExpandConstant('{localappdata}\offline-assistant'), True, True, True);
end;
